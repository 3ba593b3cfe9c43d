// Command pagetouch measures what the first touch of a memory page costs on
// this machine: the cost that dominates a process's start wherever it is
// high (a new process touches every page it uses for the first time, and
// airlock starts two Go processes per sandbox). On bare metal, or a virtual
// machine with hardware nested paging, a first touch costs well under a
// microsecond; under shadow paging (such as PVM) every first touch in a new
// address space traps to the hypervisor, even for a page the guest kernel
// already mapped. bench/compare.sh prints its line beside the sandbox
// figures.
//
// With -exit it exits at once: a Go process's start, the floor under any Go
// command's start, for hyperfine beside /bin/true.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	page  = 4 << 10
	huge  = 2 << 20
	pages = huge / page
)

func main() {
	exit := flag.Bool("exit", false, "exit at once (a Go process's start)")
	rounds := flag.Int("rounds", 21, "rounds per figure (the median is printed)")
	flag.Parse()
	if *exit {
		return
	}
	var fresh, populated, populate, thp []time.Duration
	hugeOK := true
	for range *rounds {
		fresh = append(fresh, touchRound(unix.MADV_NOHUGEPAGE, false, nil))
		var p time.Duration
		populated = append(populated, touchRound(unix.MADV_NOHUGEPAGE, true, &p))
		populate = append(populate, p)
		d := touchRound(unix.MADV_HUGEPAGE, false, nil)
		if d < 0 {
			hugeOK = false
		}
		thp = append(thp, d)
	}
	perPage := func(d []time.Duration) string {
		return fmt.Sprintf("%.2f µs", float64(median(d).Nanoseconds())/1e3/pages)
	}
	fmt.Printf("first touch of a 4 KiB page (median of %d rounds of %d pages): fresh %s; already mapped by the kernel (MADV_POPULATE_WRITE, %s a page) %s; ",
		*rounds, pages, perPage(fresh), perPage(populate), perPage(populated))
	if hugeOK {
		fmt.Printf("in a 2 MiB huge page %s\n", perPage(thp))
	} else {
		fmt.Printf("huge pages not available\n")
	}
}

// touchRound maps 2 MiB aligned to 2 MiB, advises it, populates it first
// when asked (its time in *pop), and returns how long writing one byte to
// each of its pages took; -1 when advice was MADV_HUGEPAGE and no huge
// page backs it.
func touchRound(advice int, prefault bool, pop *time.Duration) time.Duration {
	m, err := unix.Mmap(-1, 0, 2*huge, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fail(err)
	}
	defer unix.Munmap(m)
	off := 0
	for uintptrOf(m[off:])%huge != 0 {
		off += page
	}
	b := m[off : off+huge]
	if err := unix.Madvise(b, advice); err != nil {
		fail(fmt.Errorf("madvise: %w", err))
	}
	if prefault {
		t := time.Now()
		if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); err != nil {
			fail(fmt.Errorf("madvise(MADV_POPULATE_WRITE): %w", err))
		}
		*pop = time.Since(t)
	}
	t := time.Now()
	for i := 0; i < len(b); i += page {
		b[i] = 1
	}
	d := time.Since(t)
	if advice == unix.MADV_HUGEPAGE && !backedHuge(b) {
		return -1
	}
	return d
}

// backedHuge reports whether a huge page backs b: the AnonHugePages of
// its mapping in /proc/self/smaps (b starts a mapping of its own, split
// off by its advice).
func backedHuge(b []byte) bool {
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return false
	}
	header := fmt.Sprintf("%x-", uintptrOf(b))
	in := false
	for line := range strings.Lines(string(smaps)) {
		if rest, ok := strings.CutPrefix(line, "AnonHugePages:"); ok && in {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kb >= huge>>10
		}
		if line[0] >= '0' && line[0] <= '9' || line[0] >= 'a' && line[0] <= 'f' {
			in = strings.HasPrefix(line, header)
		}
	}
	return false
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pagetouch:", err)
	os.Exit(1)
}
