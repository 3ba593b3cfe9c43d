#include "textflag.h"

// airlock_thin_entry is the ELF entry of a front end built with the
// airlock_thin tag (scripts/build-thin.sh links with
// -E=airlock_thin_entry). It hands the kernel's stack pointer, which
// points at argc, to the C function in the package's .syso; when that
// returns, the Go runtime starts from the same stack, untouched, as it
// would have without this entry.
TEXT airlock_thin_entry(SB),NOSPLIT|NOFRAME,$0
	MOVQ SP, DI
	CALL airlock_thin_main(SB)
	JMP _rt0_amd64_linux(SB)
