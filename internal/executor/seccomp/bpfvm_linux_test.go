package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// A classic BPF interpreter for seccomp filters, so the assembled program
// can be run against synthetic system calls without installing it.

// seccompData mirrors struct seccomp_data.
type seccompData struct {
	nr   uint32 // an int in the kernel; negative numbers wrap
	arch uint32
	ip   uint64
	args [6]uint64
}

const sizeofSeccompData = 64

// bytes lays d out as the kernel does on a little-endian machine.
func (d seccompData) bytes() [sizeofSeccompData]byte {
	var b [sizeofSeccompData]byte
	binary.LittleEndian.PutUint32(b[0:], d.nr)
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	binary.LittleEndian.PutUint64(b[8:], d.ip)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

var errFellOff = errors.New("program ran past its last instruction")

// run executes prog on d and returns the filter's return value and the
// number of instructions executed. It models the instructions this package
// emits and fails on anything else, so a new kind of instruction cannot go
// untested.
func run(prog []unix.SockFilter, d seccompData) (ret uint32, steps int, err error) {
	data := d.bytes()
	var a uint32
	pc := 0
	for {
		if pc < 0 || pc >= len(prog) {
			return 0, steps, errFellOff
		}
		ins := prog[pc]
		pc++
		steps++
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if ins.K%4 != 0 || ins.K+4 > sizeofSeccompData {
				return 0, steps, fmt.Errorf("pc %d: load from offset %d outside seccomp_data", pc-1, ins.K)
			}
			a = binary.LittleEndian.Uint32(data[ins.K:])
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(ins.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			pc += cond(a == ins.K, ins)
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			pc += cond(a > ins.K, ins)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			pc += cond(a >= ins.K, ins)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			pc += cond(a&ins.K != 0, ins)
		case unix.BPF_RET | unix.BPF_K:
			return ins.K, steps, nil
		default:
			return 0, steps, fmt.Errorf("pc %d: unsupported opcode %#x", pc-1, ins.Code)
		}
	}
}

func cond(ok bool, ins unix.SockFilter) int {
	if ok {
		return int(ins.Jt)
	}
	return int(ins.Jf)
}

// validate applies the kernel's static checks (bpf_check_classic and
// seccomp_check_filter): a length within limits, jumps that land inside the
// program, aligned loads within seccomp_data, and a return at the end.
func validate(prog []unix.SockFilter) error {
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return fmt.Errorf("length %d out of range", len(prog))
	}
	for pc, ins := range prog {
		switch ins.Code &^ (unix.BPF_K | unix.BPF_X) {
		case unix.BPF_JMP | unix.BPF_JA:
			if pc+1+int(ins.K) >= len(prog) {
				return fmt.Errorf("pc %d: ja %d lands outside the program", pc, ins.K)
			}
		case unix.BPF_JMP | unix.BPF_JEQ, unix.BPF_JMP | unix.BPF_JGT,
			unix.BPF_JMP | unix.BPF_JGE, unix.BPF_JMP | unix.BPF_JSET:
			if pc+1+int(ins.Jt) >= len(prog) || pc+1+int(ins.Jf) >= len(prog) {
				return fmt.Errorf("pc %d: jump %d/%d lands outside the program", pc, ins.Jt, ins.Jf)
			}
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if ins.K%4 != 0 || ins.K+4 > sizeofSeccompData {
				return fmt.Errorf("pc %d: load from offset %d", pc, ins.K)
			}
		case unix.BPF_RET:
		default:
			return fmt.Errorf("pc %d: opcode %#x not emitted by this package", pc, ins.Code)
		}
	}
	if last := prog[len(prog)-1]; last.Code&0x07 != unix.BPF_RET {
		return fmt.Errorf("last instruction %#x is not a return", last.Code)
	}
	return nil
}
