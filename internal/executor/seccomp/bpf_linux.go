package seccomp

import (
	"cmp"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// A small assembler for classic BPF seccomp filters.
//
// Everything is built from blocks. A block is closed: every path through it
// ends in a return and every jump in it lands inside it. Closed blocks can be
// nested and concatenated without fixing up offsets, and a finished program
// can never run off its end. Jumps only go forward, as classic BPF requires.

// Offsets into struct seccomp_data (include/uapi/linux/seccomp.h):
//
//	int   nr;                  // 0
//	__u32 arch;                // 4
//	__u64 instruction_pointer; // 8
//	__u64 args[6];             // 16
const (
	offsetNr   = 0
	offsetArch = 4
	offsetArgs = 16
)

// maxJump is the largest offset a conditional jump can encode: jt and jf are
// 8 bits wide.
const maxJump = 0xff

type block []unix.SockFilter

func concat(blocks ...block) block {
	return slices.Concat(blocks...)
}

func ret(v uint32) block {
	return block{{Code: unix.BPF_RET | unix.BPF_K, K: v}}
}

func load(offset uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offset}
}

// loadArgLow loads the low 32 bits of system call argument i. seccomp_data
// holds each argument as a native-endian 64-bit value; amd64 and arm64 are
// little-endian, so the low word sits at the argument's own offset and the
// high word 4 bytes after it. Every argument this filter inspects is one the
// kernel truncates to 32 bits (an int or unsigned int parameter, or
// lower_32_bits() of clone's flags), so the high word cannot change what the
// kernel does and is deliberately not examined.
func loadArgLow(i int) unix.SockFilter {
	return load(offsetArgs + 8*uint32(i))
}

// jump returns a conditional jump comparing A with k. It fails rather than
// truncate an offset that does not fit in 8 bits.
func jump(op uint16, k uint32, jt, jf int) (unix.SockFilter, error) {
	if jt < 0 || jt > maxJump || jf < 0 || jf > maxJump {
		return unix.SockFilter{}, fmt.Errorf("jump offsets %d/%d do not fit in 8 bits", jt, jf)
	}
	return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, Jt: uint8(jt), Jf: uint8(jf), K: k}, nil
}

// jumpAlways returns an unconditional jump over n instructions. Its offset
// is 32 bits wide; the program length limit bounds it long before that.
func jumpAlways(n int) (unix.SockFilter, error) {
	if n < 0 || n >= unix.BPF_MAXINSNS {
		return unix.SockFilter{}, fmt.Errorf("jump over %d instructions exceeds the program limit", n)
	}
	return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JA, K: uint32(n)}, nil
}

// branch returns a block that runs t when "A op k" holds and f otherwise
// (op is BPF_JEQ, BPF_JGE, BPF_JGT or BPF_JSET). f follows the jump and t
// follows f, so only the true path needs an offset, len(f). When f is too
// long for an 8-bit offset, the true path goes through an unconditional jump:
//
//	short: jop k, jt=len(f), jf=0;  f;  t
//	long:  jop k, jt=0, jf=1;  ja len(f);  f;  t
func branch(op uint16, k uint32, t, f block) (block, error) {
	if len(f) <= maxJump {
		j, err := jump(op, k, len(f), 0)
		if err != nil {
			return nil, err
		}
		return concat(block{j}, f, t), nil
	}
	j, err := jump(op, k, 0, 1)
	if err != nil {
		return nil, err
	}
	ja, err := jumpAlways(len(f))
	if err != nil {
		return nil, err
	}
	return concat(block{j, ja}, f, t), nil
}

// oneOf returns a block that runs in when A equals one of values and out
// otherwise, as a chain of equality tests. Meant for short lists.
func oneOf(values []uint32, in, out block) (block, error) {
	b := out
	for i := len(values) - 1; i >= 0; i-- {
		var err error
		if b, err = branch(unix.BPF_JEQ, values[i], in, b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// A leaf is the code run for one value or range of values of A. Leaves with
// the same key have the same code, so neighbouring ranges with equal keys
// can be merged.
type leaf struct {
	key  string
	code block
}

// An interval is the values from lo up to the next interval's lo (or up to
// 2^32-1 for the last one), all handled by the same leaf.
type interval struct {
	lo uint32
	leaf
}

// partition turns rules for single values of A into intervals covering all
// 2^32 values. Values without a rule get def; neighbours with the same key
// are merged, so a run of consecutive allowed values costs one interval.
func partition(rules map[uint32]leaf, def leaf) []interval {
	var points []interval
	if _, ok := rules[0]; !ok {
		points = append(points, interval{0, def})
	}
	for v, l := range rules {
		points = append(points, interval{v, l})
		if _, ok := rules[v+1]; !ok && v != ^uint32(0) {
			points = append(points, interval{v + 1, def})
		}
	}
	slices.SortFunc(points, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	ivs := points[:0]
	for _, p := range points {
		if n := len(ivs); n > 0 && ivs[n-1].key == p.key {
			continue
		}
		ivs = append(ivs, p)
	}
	return ivs
}

// search returns a block that finds the interval holding A by binary search
// on the interval starts and runs that interval's leaf. A search over n
// intervals executes about log2(n) jumps. ivs must start at 0 and be sorted
// by strictly increasing lo, as partition returns them.
func search(ivs []interval) (block, error) {
	if len(ivs) == 0 || ivs[0].lo != 0 {
		return nil, fmt.Errorf("intervals do not start at 0")
	}
	for i := 1; i < len(ivs); i++ {
		if ivs[i].lo <= ivs[i-1].lo {
			return nil, fmt.Errorf("intervals not sorted at %#x", ivs[i].lo)
		}
	}
	return searchSorted(ivs)
}

func searchSorted(ivs []interval) (block, error) {
	if len(ivs) == 1 {
		return ivs[0].code, nil
	}
	mid := len(ivs) / 2
	upper, err := searchSorted(ivs[mid:])
	if err != nil {
		return nil, err
	}
	lower, err := searchSorted(ivs[:mid])
	if err != nil {
		return nil, err
	}
	return branch(unix.BPF_JGE, ivs[mid].lo, upper, lower)
}
