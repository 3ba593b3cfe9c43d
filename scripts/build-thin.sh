#!/usr/bin/env bash
# build-thin.sh OUTDIR: builds the front end with its pre-runtime thin
# client (package internal/thinentry) into OUTDIR/airlock: it generates
# the package's .syso, then links cmd/airlock with the airlock_thin tag and
# -E=airlock_thin_entry.
#
# The C (internal/thinentry/c/thin.c) becomes the package's .syso
# (generated, never committed) in three steps, because Go's internal
# linker, linking a static binary, applies none of a host object's own
# relocations (it resolves only references from Go code into it): a
# string literal's address came out as the next instruction's, without
# an error. So the C is compiled position-independent (-fpie: every
# reference PC-relative), linked on its own at address 0 into one block
# of code and constants (ld resolves every reference inside it), and that
# block is wrapped into an object with one symbol, airlock_thin_main, at
# its start and no relocation. Each step is checked: no undefined symbol
# (a memcpy or memset the compiler emitted), no relocation other than
# PC-relative, no .data or .bss (they would not be in the block), and
# none left in the .syso.
#
# Exit status 3: this machine cannot build it (not linux/amd64, or no C
# compiler or binutils); the caller builds the plain front end instead.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
CC=${CC:-cc}

goos=$("$GO" env GOOS)
arch=$("$GO" env GOARCH)
if [ "$goos" != linux ] || [ "$arch" != amd64 ]; then
	echo "build-thin.sh: the thin entry is written for linux/amd64, not $goos/$arch" >&2
	exit 3
fi
for tool in "$CC" ld objcopy readelf nm; do
	if ! command -v "$tool" >/dev/null; then
		echo "build-thin.sh: no $tool to build the thin entry with" >&2
		exit 3
	fi
done

src=$root/internal/thinentry/c/thin.c
syso=$root/internal/thinentry/thin_linux_amd64.syso
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
	echo "build-thin.sh: $src: $1" >&2
	shift
	printf '%s\n' "$@" >&2
	exit 1
}

"$CC" -O2 -ffreestanding -fno-builtin -nostdlib -fno-stack-protector -fpie \
	-fno-asynchronous-unwind-tables -fcf-protection=none -fno-tree-loop-distribute-patterns \
	-c -o "$tmp/thin.o" "$src"
undefined=$(nm -u "$tmp/thin.o")
[ -z "$undefined" ] || fail "it refers to symbols it does not define:" "$undefined"
relocs=$(readelf -rW "$tmp/thin.o" | awk '$3 ~ /^R_X86_64_/ && $3 != "R_X86_64_PC32" && $3 != "R_X86_64_PLT32" {print $3}' | sort -u)
[ -z "$relocs" ] || fail "it has relocations that are not PC-relative:" "$relocs"

cat >"$tmp/thin.ld" <<'LD'
SECTIONS {
	. = 0;
	.text : { *(.text.entry) *(.text .text.*) *(.rodata .rodata.*) }
	.data : { *(.data .data.*) *(.bss .bss.*) *(COMMON) }
	/DISCARD/ : { *(.comment) *(.note .note.*) *(.eh_frame) }
}
LD
ld -static -nostdlib -T "$tmp/thin.ld" -e airlock_thin_main -o "$tmp/thin.elf" "$tmp/thin.o"
data=$(readelf -SW "$tmp/thin.elf" | sed -n 's/^ *\[ *[0-9]*\] //p' | awk '$1 == ".data" && $5 != "000000" {print}')
[ -z "$data" ] || fail "it has writable static data, which the block cannot hold:" "$data"
entry=$(nm "$tmp/thin.elf" | awk '$3 == "airlock_thin_main" {print $1}')
[ "$((16#${entry:-1}))" -eq 0 ] || fail "airlock_thin_main is not at the block's start (section .text.entry)" "$entry"
objcopy -O binary -j .text "$tmp/thin.elf" "$tmp/thin.bin"

# The block keeps its layout only if it starts at an address as aligned as
# any section in it wants (.rodata's 32 bytes: an aligned SSE load of a
# constant faults otherwise).
align=$(readelf -SW "$tmp/thin.o" | sed -n 's/^ *\[ *[0-9]*\] .* \([0-9][0-9]*\)$/\1/p' | sort -n | tail -1)
[ "${align:-0}" -le 64 ] || fail "a section wants an alignment of $align bytes, more than the 64 the block is given"
cat >"$tmp/wrap.s" <<AS
	.section .text
	.balign 64
	.globl airlock_thin_main
	.type airlock_thin_main, @function
airlock_thin_main:
	.incbin "$tmp/thin.bin"
	.size airlock_thin_main, . - airlock_thin_main
	.section .note.GNU-stack, "", @progbits
AS
"$CC" -c -o "$tmp/thin.syso" "$tmp/wrap.s"
left=$(readelf -rW "$tmp/thin.syso" | grep -c R_X86_64_ || true)
[ "$left" -eq 0 ] || fail "the wrapped object still has $left relocations"
# Renamed into place from the same directory: a go build beside this one
# (another test binary's) reads the old object or the new, never half of one.
cp "$tmp/thin.syso" "$syso.$$"
mv "$syso.$$" "$syso"

cd "$root"
# BUILDFLAGS: as make build passes them (scripts/demo.sh: -v).
# shellcheck disable=SC2086
CGO_ENABLED=0 "$GO" build ${BUILDFLAGS:-} -trimpath -tags airlock_thin -ldflags=-E=airlock_thin_entry -o "$out/airlock" ./cmd/airlock
