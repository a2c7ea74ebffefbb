//! The trees the docs' examples work on, by name (`fixture=NAME`). Each is
//! a shell script written with the docs' paths, run in the sandbox as the
//! examples are (so `/srv/www` here is the `/srv/www` of the example).
//! Small on purpose: a "million small files" is two thousand here.

/// A fixture: a script that makes trees, and maybe a service it starts
/// (a command that keeps running, ready once the port takes connections).
pub struct Fixture {
    pub script: &'static str,
    pub service: Option<(&'static str, u16)>,
    /// What the machine needs for it (as an example's `needs=`).
    pub needs: &'static [&'static str],
}

const fn trees(script: &'static str) -> Fixture {
    Fixture {
        script,
        service: None,
        needs: &[],
    }
}

pub fn fixture(name: &str) -> Option<Fixture> {
    Some(match name {
        "home" => trees(HOME),
        "disk" => trees("mkdir -p /mnt/backup\n"),
        "photos" => trees(PHOTOS),
        "server-www" => trees(SERVER_WWW),
        "site" => trees(SITE),
        "notes" => trees(NOTES),
        "pair" => trees(PAIR),
        "many-files" => trees(MANY_FILES),
        "union" => trees(UNION),
        "delta-files" => trees(DELTA_FILES),
        "daemon-dirs" => trees(DAEMON_DIRS),
        "daemon-keys" => trees(DAEMON_KEYS),
        "redis" => Fixture {
            script: "",
            service: Some((
                "exec redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no",
                6379,
            )),
            needs: &["redis"],
        },
        _ => return None,
    })
}

const HOME: &str = r#"
mkdir -p /home/me/Documents /home/me/Pictures/2024 /home/alice/music
echo "minutes of the meeting" > /home/me/Documents/minutes.txt
head -c 200000 /dev/urandom > /home/me/Pictures/2024/beach.jpg
ln /home/me/Pictures/2024/beach.jpg /home/me/Pictures/best.jpg
ln -s Documents/minutes.txt /home/me/latest
echo "la la" > /home/alice/music/song.txt
chmod 600 /home/alice/music/song.txt
"#;

const PHOTOS: &str = r#"
mkdir -p ~/photos/2024 ~/photos/cache
head -c 100000 /dev/urandom > ~/photos/2024/beach.jpg
head -c 50000 /dev/urandom > ~/photos/2024/boat.jpg
echo partial > ~/photos/2024/upload.tmp
echo thumbnails > ~/photos/cache/index
mkdir -p /mnt/backup /srv
"#;

const SERVER_WWW: &str = r#"
mkdir -p /srv/www/css /mnt/backup
echo "<h1>hello</h1>" > /srv/www/index.html
echo "body { margin: 0 }" > /srv/www/css/site.css
"#;

const SITE: &str = r#"
mkdir -p ~/site /srv/www
echo "<h1>hello</h1>" > ~/site/index.html
"#;

const NOTES: &str = r#"
mkdir -p /home/me/notes /srv/notes
echo "buy milk" > /home/me/notes/todo.txt
echo "server side" > /srv/notes/ideas.txt
"#;

const PAIR: &str = r#"
mkdir -p /home/me/notes /media/usb/notes
echo "buy milk" > /home/me/notes/todo.txt
echo "on the stick" > /media/usb/notes/ideas.txt
"#;

const MANY_FILES: &str = r#"
for d in $(seq 1 20); do
    mkdir -p /srv/data/dir$d
    for f in $(seq 1 100); do echo "file $d/$f" > /srv/data/dir$d/f$f; done
done
"#;

const UNION: &str = r#"
mkdir -p /srv/base /srv/changes /srv/more /mnt/merged
echo "port = 80" > /srv/base/config.txt
echo "old" > /srv/base/old-notes.txt
echo "more" > /srv/more/extra.txt
"#;

const DELTA_FILES: &str = r#"
head -c 3000000 /dev/urandom > disk-v1.img
cp disk-v1.img disk-v2.img
printf 'an edit in the middle' | dd of=disk-v2.img bs=1 seek=1500000 conv=notrunc status=none
head -c 4096 /dev/urandom >> disk-v2.img
"#;

const DAEMON_DIRS: &str = r#"
mkdir -p /etc/accord /srv/backups/me /srv/photos/2024 ~/work
echo "a photo" > /srv/photos/2024/beach.jpg
echo "draft" > ~/work/report.txt
"#;

const DAEMON_KEYS: &str = r#"
mkdir -p /etc/accord /srv/backups /srv/photos
accord keygen -f /etc/accord/key -C server > /dev/null
accord keygen -C me > /dev/null
cat ~/.config/accord/key.pub > /etc/accord/authorized_keys
"#;
