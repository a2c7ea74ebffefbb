#!/bin/sh
# Generate a small C project (N modules, default 150: N .c files, N headers, a main and a
# Makefile) in directory $1. Deterministic, so two builds of it can be compared byte for byte.
set -eu
dir=$1
n=${2:-150}
mkdir -p "$dir/src" "$dir/include"
i=0
: > "$dir/include/all.h"
while [ $i -lt $n ]; do
    cat > "$dir/include/m$i.h" <<H
#ifndef M${i}_H
#define M${i}_H
unsigned long m$i(unsigned long x);
#endif
H
    echo "#include \"m$i.h\"" >> "$dir/include/all.h"
    cat > "$dir/src/m$i.c" <<C
#include "m$i.h"
/* module $i: a little arithmetic so the compiler has work to do */
static unsigned long mix$i(unsigned long x) {
    unsigned long h = x ^ ${i}UL;
    for (int k = 0; k < 16; k++) h = h * 6364136223846793005UL + 1442695040888963407UL + (unsigned long)k;
    return h;
}
unsigned long m$i(unsigned long x) { return mix$i(x) % 1000003UL; }
C
    i=$((i + 1))
done
{
    echo '#include <stdio.h>'
    echo '#include "all.h"'
    echo 'int main(void) {'
    echo '    unsigned long s = 0;'
    i=0
    while [ $i -lt $n ]; do
        printf '    s += m%d(s + %d); printf("m%d %%lu\\n", s);\n' $i $i $i
        i=$((i + 1))
    done
    printf '    printf("total %%lu\\n", s);\n'
    echo '    return 0;'
    echo '}'
} > "$dir/src/main.c"
cat > "$dir/Makefile" <<'M'
SRCS := $(wildcard src/*.c)
OBJS := $(patsubst src/%.c,obj/%.o,$(SRCS))
CFLAGS := -O2 -Iinclude
prog: $(OBJS)
	$(CC) -o $@ $(OBJS)
obj/%.o: src/%.c | obj
	$(CC) $(CFLAGS) -c -o $@ $<
obj:
	mkdir -p obj
clean:
	rm -rf obj prog
M
