package landlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	rEXEC     = unix.LANDLOCK_ACCESS_FS_EXECUTE
	rWRITE    = unix.LANDLOCK_ACCESS_FS_WRITE_FILE
	rREAD     = unix.LANDLOCK_ACCESS_FS_READ_FILE
	rREADDIR  = unix.LANDLOCK_ACCESS_FS_READ_DIR
	rRMDIR    = unix.LANDLOCK_ACCESS_FS_REMOVE_DIR
	rRMFILE   = unix.LANDLOCK_ACCESS_FS_REMOVE_FILE
	rMKCHAR   = unix.LANDLOCK_ACCESS_FS_MAKE_CHAR
	rMKDIR    = unix.LANDLOCK_ACCESS_FS_MAKE_DIR
	rMKREG    = unix.LANDLOCK_ACCESS_FS_MAKE_REG
	rMKSOCK   = unix.LANDLOCK_ACCESS_FS_MAKE_SOCK
	rMKFIFO   = unix.LANDLOCK_ACCESS_FS_MAKE_FIFO
	rMKBLOCK  = unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK
	rMKSYM    = unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	rREFER    = unix.LANDLOCK_ACCESS_FS_REFER
	rTRUNC    = unix.LANDLOCK_ACCESS_FS_TRUNCATE
	rIOCTLDEV = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	sABSTRACT = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	sSIGNAL   = unix.LANDLOCK_SCOPE_SIGNAL

	// Spelled out bit by bit rather than reusing the package's constants,
	// so a wrong constant in the package cannot hide behind the same
	// mistake here.
	wantV1 = rEXEC | rWRITE | rREAD | rREADDIR | rRMDIR | rRMFILE | rMKCHAR |
		rMKDIR | rMKREG | rMKSOCK | rMKFIFO | rMKBLOCK | rMKSYM
	wantRO   = rEXEC | rREAD | rREADDIR
	wantRWv1 = wantRO | rWRITE | rRMDIR | rRMFILE | rMKDIR | rMKREG | rMKSOCK | rMKFIFO | rMKSYM
	wantDev  = rREAD | rWRITE

	erratum2 = 1 << 1
)

func TestNewPlan(t *testing.T) {
	tests := []struct {
		name      string
		kernelABI int
		errata    uint64
		want      plan
	}{
		{
			name: "abi1 has no refer", kernelABI: 1,
			want: plan{abi: 1, handledFS: wantV1, readOnly: wantRO, readWrite: wantRWv1, devices: wantDev},
		},
		{
			name: "abi2 grants refer in read-write", kernelABI: 2,
			want: plan{
				abi: 2, handledFS: wantV1 | rREFER, readOnly: wantRO,
				readWrite: wantRWv1 | rREFER, devices: wantDev,
			},
		},
		{
			name: "abi3 handles truncate", kernelABI: 3,
			want: plan{
				abi: 3, handledFS: wantV1 | rREFER | rTRUNC, readOnly: wantRO,
				readWrite: wantRWv1 | rREFER | rTRUNC, devices: wantDev,
			},
		},
		{
			name: "abi4 adds only network rights, which are not handled", kernelABI: 4,
			want: plan{
				abi: 4, handledFS: wantV1 | rREFER | rTRUNC, readOnly: wantRO,
				readWrite: wantRWv1 | rREFER | rTRUNC, devices: wantDev,
			},
		},
		{
			name: "abi5 grants device ioctl on devices only", kernelABI: 5,
			want: plan{
				abi: 5, handledFS: wantV1 | rREFER | rTRUNC | rIOCTLDEV, readOnly: wantRO,
				readWrite: wantRWv1 | rREFER | rTRUNC, devices: wantDev | rIOCTLDEV,
			},
		},
		{
			name: "abi6 with erratum 2 scopes signals and abstract sockets", kernelABI: 6, errata: erratum2,
			want: plan{
				abi: 6, handledFS: wantV1 | rREFER | rTRUNC | rIOCTLDEV, scoped: sABSTRACT | sSIGNAL,
				readOnly: wantRO, readWrite: wantRWv1 | rREFER | rTRUNC, devices: wantDev | rIOCTLDEV,
			},
		},
		{
			name: "abi6 without erratum 2 does not scope signals", kernelABI: 6, errata: 1,
			want: plan{
				abi: 6, handledFS: wantV1 | rREFER | rTRUNC | rIOCTLDEV, scoped: sABSTRACT,
				readOnly: wantRO, readWrite: wantRWv1 | rREFER | rTRUNC, devices: wantDev | rIOCTLDEV,
			},
		},
		{
			name: "abi7 as on the reference kernel", kernelABI: 7, errata: 7,
			want: plan{
				abi: 7, handledFS: wantV1 | rREFER | rTRUNC | rIOCTLDEV, scoped: sABSTRACT | sSIGNAL,
				readOnly: wantRO, readWrite: wantRWv1 | rREFER | rTRUNC, devices: wantDev | rIOCTLDEV,
			},
		},
		{
			name: "abi8 uses tsync and scopes signals regardless of errata", kernelABI: 8,
			want: plan{
				abi: 8, handledFS: wantV1 | rREFER | rTRUNC | rIOCTLDEV, scoped: sABSTRACT | sSIGNAL, tsync: true,
				readOnly: wantRO, readWrite: wantRWv1 | rREFER | rTRUNC, devices: wantDev | rIOCTLDEV,
			},
		},
		{
			name: "abi9 is capped at 8 and resolve_unix stays unhandled", kernelABI: 9, errata: 7,
			want: plan{
				abi: 8, handledFS: wantV1 | rREFER | rTRUNC | rIOCTLDEV, scoped: sABSTRACT | sSIGNAL, tsync: true,
				readOnly: wantRO, readWrite: wantRWv1 | rREFER | rTRUNC, devices: wantDev | rIOCTLDEV,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newPlan(tt.kernelABI, tt.errata); got != tt.want {
				t.Errorf("newPlan(%d, %#x) = %+v, want %+v", tt.kernelABI, tt.errata, got, tt.want)
			}
		})
	}
}

// TestPlanInvariants checks, for every ABI, the properties the security
// argument relies on.
func TestPlanInvariants(t *testing.T) {
	for abi := 1; abi <= 12; abi++ {
		p := newPlan(abi, 0)
		for name, granted := range map[string]uint64{"readOnly": p.readOnly, "readWrite": p.readWrite, "devices": p.devices} {
			if granted&^p.handledFS != 0 {
				t.Errorf("abi %d: %s grants %#x, which is not handled (%#x)", abi, name, granted, p.handledFS)
			}
		}
		if p.readOnly&^p.readWrite != 0 {
			t.Errorf("abi %d: readOnly %#x is not a subset of readWrite %#x", abi, p.readOnly, p.readWrite)
		}
		if bad := p.readWrite & (rMKCHAR | rMKBLOCK | rIOCTLDEV); bad != 0 {
			t.Errorf("abi %d: readWrite grants device rights %#x", abi, bad)
		}
		if bad := p.devices &^ (rREAD | rWRITE | rIOCTLDEV); bad != 0 {
			t.Errorf("abi %d: devices grants %#x beyond read, write and ioctl", abi, bad)
		}
		if p.handledFS&unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX != 0 {
			t.Errorf("abi %d: resolve_unix is handled, but Rules cannot allow any socket", abi)
		}
		if p.abi > maxABI || p.abi > abi {
			t.Errorf("abi %d: plan uses abi %d", abi, p.abi)
		}
	}
}

func TestRuleAccess(t *testing.T) {
	tests := []struct {
		name   string
		access uint64
		isDir  bool
		want   uint64
	}{
		{"directory keeps read-write", wantRWv1 | rREFER | rTRUNC, true, wantRWv1 | rREFER | rTRUNC},
		{"file drops directory rights from read-write", wantRWv1 | rREFER | rTRUNC, false, rEXEC | rWRITE | rREAD | rTRUNC},
		{"file drops read_dir from read-only", wantRO, false, rEXEC | rREAD},
		{"device file keeps read, write and ioctl", wantDev | rIOCTLDEV, false, wantDev | rIOCTLDEV},
		{"device directory keeps read, write and ioctl", wantDev | rIOCTLDEV, true, wantDev | rIOCTLDEV},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ruleAccess(tt.access, tt.isDir); got != tt.want {
				t.Errorf("ruleAccess(%#x, %v) = %#x, want %#x", tt.access, tt.isDir, got, tt.want)
			}
		})
	}
}

func TestRulesValidate(t *testing.T) {
	tests := []struct {
		name    string
		rules   Rules
		wantErr []string // substrings; nil means no error
	}{
		{"empty rules deny everything", Rules{}, nil},
		{"absolute paths", Rules{ReadOnly: []string{"/usr"}, ReadWrite: []string{"/work"}, Devices: []string{"/dev/null"}}, nil},
		{"relative read-only", Rules{ReadOnly: []string{"usr"}}, []string{`"usr"`}},
		{"empty path", Rules{ReadWrite: []string{""}}, []string{`""`}},
		{"every bad path is reported", Rules{ReadOnly: []string{"a"}, Devices: []string{"./b"}}, []string{`"a"`, `"./b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rules.validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("validate() = nil, want error mentioning %q", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("validate() = %q, want it to mention %s", err, s)
				}
			}
		})
	}
}

// TestFileRuleMasking shows why ruleAccess exists: the kernel rejects a
// directory right on a rule for a regular file. It builds rulesets only and
// never restricts the test process.
func TestFileRuleMasking(t *testing.T) {
	abi := requireLandlock(t)
	p := newPlan(abi, Errata())
	rulesetFD, err := createRuleset(p.handledFS, p.scoped, p.abi >= abiScope)
	if err != nil {
		t.Fatalf("createRuleset: %v", err)
	}
	defer unix.Close(rulesetFD)

	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(file, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	if err := addPathBeneath(rulesetFD, fd, p.readWrite); !errors.Is(err, unix.EINVAL) {
		t.Errorf("addPathBeneath(file, readWrite) = %v, want EINVAL", err)
	}
	if err := addPathBeneath(rulesetFD, fd, ruleAccess(p.readWrite, false)); err != nil {
		t.Errorf("addPathBeneath(file, ruleAccess(readWrite, false)) = %v, want nil", err)
	}
	if added, err := addPathRule(rulesetFD, file, p.readOnly); !added || err != nil {
		t.Errorf("addPathRule(file, readOnly) = %v, %v, want true, nil", added, err)
	}
	if added, err := addPathRule(rulesetFD, file+".missing", p.readOnly); added || err != nil {
		t.Errorf("addPathRule(missing, readOnly) = %v, %v, want false, nil", added, err)
	}
}

func requireLandlock(t *testing.T) int {
	t.Helper()
	abi, err := ABI()
	if err != nil {
		t.Fatalf("ABI() = %v", err)
	}
	if abi == 0 {
		t.Skip("landlock is not available on this kernel (not built in or disabled at boot)")
	}
	return abi
}
