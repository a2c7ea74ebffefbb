# Start an sshd of our own on a loopback port, with keys made for the run
# (sourced by the remote benchmarks). Sets SSH_PORT, SSH_KEY and RSH.
#   start_sshd WORKDIR PORT
start_sshd() {
    local dir=$1
    SSH_PORT=$2
    mkdir -p "$dir"
    rm -f "$dir"/host_key* "$dir"/client_key*
    ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
    ssh-keygen -q -t ed25519 -N '' -f "$dir/client_key"
    cp "$dir/client_key.pub" "$dir/authorized_keys"
    cat > "$dir/sshd_config" <<CONF
ListenAddress 127.0.0.1
Port $SSH_PORT
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd.pid
StrictModes no
UsePAM no
PermitRootLogin yes
PasswordAuthentication no
LogLevel ERROR
CONF
    mkdir -p /run/sshd
    /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
    SSH_KEY=$dir/client_key
    SSHD_PIDFILE=$dir/sshd.pid
    for _ in $(seq 50); do [ -s "$SSHD_PIDFILE" ] && break; sleep 0.1; done
}

stop_sshd() {
    [ -n "${SSHD_PIDFILE:-}" ] && [ -s "$SSHD_PIDFILE" ] && kill "$(cat "$SSHD_PIDFILE")" 2>/dev/null || true
}

# rsh_for PORT: the ssh command line for a port (the proxy's or sshd's).
rsh_for() {
    echo "ssh -p $1 -i $SSH_KEY -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR -o ControlMaster=no"
}
