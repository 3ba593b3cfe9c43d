#include "textflag.h"

// func rawVfork(trap, a1, a2, a3 uintptr) (r1 uintptr, err syscall.Errno)
//
// A copy of the syscall package's rawVforkSyscall (not exported): the
// return address is kept in a register across the system call, so the
// child of a CLONE_VM|CLONE_VFORK clone, which runs on this stack until
// it execs, cannot overwrite it for the parent.
TEXT ·rawVfork(SB),NOSPLIT|NOFRAME,$0-48
	MOVQ	a1+8(FP), DI
	MOVQ	a2+16(FP), SI
	MOVQ	a3+24(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$0, R9
	MOVQ	trap+0(FP), AX
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, r1+32(FP)
	NEGQ	AX
	MOVQ	AX, err+40(FP)
	RET
ok:
	MOVQ	AX, r1+32(FP)
	MOVQ	$0, err+40(FP)
	RET
