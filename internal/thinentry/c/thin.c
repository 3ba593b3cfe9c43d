/*
 * The thin client of airlock's front end: a warm `airlock sandbox run`
 * served before the Go runtime starts (issue 29). Package thinentry's doc
 * (internal/thinentry/thinentry.go) states the rules; this file keeps them.
 *
 * Freestanding: no libc, no thread-local storage, system calls by inline
 * asm. airlock_thin_main runs on the stack the kernel gave the process,
 * called by airlock_thin_entry (entry_linux_amd64.s). It returns only to
 * fall back: then nothing was sent that ran anything, every descriptor it
 * opened is closed, the signal mask is as it found it, and the Go runtime
 * starts as if the entry were not there. Once the sandbox host said the
 * command started, it never returns: it exits with the command's status.
 *
 * Built by scripts/build-thin.sh into internal/thinentry's .syso (never
 * committed): compiled position-independent, linked on its own into one
 * block of code and constants with every reference inside it resolved,
 * airlock_thin_main first (section .text.entry), so the .syso carries no
 * relocation. Go's internal linker, linking a static binary, does not
 * apply a host object's relocations at all (every string literal pointed
 * at the next instruction); hence also no writable static data here. The
 * script fails the build on an undefined symbol (a memcpy the compiler
 * emitted), a relocation that is not PC-relative, or any .data or .bss.
 */

typedef unsigned long u64;
typedef long i64;
typedef unsigned int u32;
typedef unsigned char u8;

/* x86-64 system call numbers. */
enum {
	SYS_read = 0,
	SYS_write = 1,
	SYS_close = 3,
	SYS_stat = 4,
	SYS_poll = 7,
	SYS_mmap = 9,
	SYS_munmap = 11,
	SYS_rt_sigprocmask = 14,
	SYS_writev = 20,
	SYS_socket = 41,
	SYS_connect = 42,
	SYS_sendto = 44,
	SYS_sendmsg = 46,
	SYS_getsockopt = 55,
	SYS_fcntl = 72,
	SYS_getcwd = 79,
	SYS_geteuid = 107,
	SYS_getppid = 110,
	SYS_prctl = 157,
	SYS_exit_group = 231,
	SYS_signalfd4 = 289,
	SYS_pipe2 = 293,
};

enum {
	EINTR = 4,
	EAGAIN = 11,
	O_NONBLOCK = 04000,
	O_CLOEXEC = 02000000,
	F_GETFD = 1,
	AF_UNIX = 1,
	SOCK_STREAM = 1,
	SOCK_CLOEXEC = 02000000,
	SOL_SOCKET = 1,
	SO_PEERCRED = 17,
	SCM_RIGHTS = 1,
	MSG_NOSIGNAL = 0x4000,
	PR_SET_PDEATHSIG = 1,
	SIGHUP = 1,
	SIGINT = 2,
	SIGQUIT = 3,
	SIGKILL = 9,
	SIGPIPE = 13,
	SIGTERM = 15,
	SIG_BLOCK = 0,
	SIG_SETMASK = 2,
	SFD_CLOEXEC = 02000000,
	POLLIN = 1,
	POLLOUT = 4,
	PROT_READ = 1,
	PROT_WRITE = 2,
	MAP_PRIVATE = 2,
	MAP_ANONYMOUS = 0x20,
	MAP_NORESERVE = 0x4000,
};

/* The execproto binary form's version, the first byte of every message. */
#define CODEC_VERSION 1
/*
 * The request's fields: a pipe of stdin follows (handoff.Request.Stdin),
 * the command line after "run" (Words), the working directory (Dir).
 */
#define FIELD_STDIN 5
#define FIELD_WORDS 7
#define FIELD_DIR 8
/* The longest working directory sent (PATH_MAX). */
#define MAX_DIR 4096
/* The most of stdin read at once into the pipe of a command that reads it (-i). */
#define STDIN_CHUNK (64 << 10)
/* The largest reply read (package handoff's maxReply). */
#define MAX_REPLY (1 << 20)
/* The largest request sent: beyond it the Go front end hands the command off itself. */
#define MAX_REQUEST (256 << 10)
/* sun_path's size. */
#define SUN_PATH 108

static i64 sys1(i64 n, i64 a) {
	i64 r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory");
	return r;
}

static i64 sys3(i64 n, i64 a, i64 b, i64 c) {
	i64 r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}

static i64 sys6(i64 n, i64 a, i64 b, i64 c, i64 d, i64 e, i64 f) {
	i64 r;
	register i64 r10 __asm__("r10") = d;
	register i64 r8 __asm__("r8") = e;
	register i64 r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}

static void __attribute__((noreturn)) exit_group(int status) {
	for (;;)
		sys1(SYS_exit_group, status);
}

struct iovec {
	const void *base;
	u64 len;
};

struct msghdr {
	void *name;
	u32 namelen;
	struct iovec *iov;
	u64 iovlen;
	void *control;
	u64 controllen;
	int flags;
};

struct sockaddr_un {
	unsigned short family;
	char path[SUN_PATH];
};

struct ucred {
	int pid;
	u32 uid;
	u32 gid;
};

/* struct stat on x86-64: st_uid is at byte 28 of 144. */
struct kstat {
	u64 dev, ino, nlink;
	u32 mode, uid, gid, pad0;
	u64 rdev;
	i64 size, blksize, blocks;
	u64 times[6];
	i64 unused[3];
};

struct pollfd {
	int fd;
	short events, revents;
};

static u64 length(const char *s) {
	u64 n = 0;
	while (s[n])
		n++;
	return n;
}

static int equal(const char *a, const char *b) {
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

/*
 * getenv returns the value of the first entry of envp named name, as Go's
 * os.Getenv does (syscall.copyenv keeps the first of duplicates), or 0.
 */
static const char *getenv(char **envp, const char *name) {
	for (; *envp; envp++) {
		const char *e = *envp, *n = name;
		while (*n && *e == *n) {
			e++;
			n++;
		}
		if (*n == 0 && *e == '=')
			return e + 1;
	}
	return 0;
}

static int set(const char *v) { return v && *v; }

/*
 * clean reports whether path is absolute with no "." or ".." component:
 * Go cleans a path lexically, the kernel resolves ".." through symbolic
 * links, so a path where they could differ is left to Go.
 */
static int clean(const char *p) {
	if (*p != '/')
		return 0;
	while (*p) {
		while (*p == '/')
			p++;
		const char *c = p;
		while (*p && *p != '/')
			p++;
		u64 n = (u64)(p - c);
		if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
	}
	return 1;
}

/* cat appends s to buf at *n, failing (0) past SUN_PATH-1 bytes. */
static int cat(char *buf, u64 *n, const char *s) {
	for (; *s; s++) {
		if (*n >= SUN_PATH - 1)
			return 0;
		buf[(*n)++] = *s;
	}
	buf[*n] = 0;
	return 1;
}

/*
 * socketPath builds the sandbox host's socket from the environment, as
 * sandboxcli.OSEnv and handoff.SocketPath do, into sa; 0 means: leave it
 * to Go.
 */
static int socketPath(char **envp, u32 euid, struct sockaddr_un *sa) {
	const char *airlockHome = getenv(envp, "AIRLOCK_HOME");
	const char *xdg = getenv(envp, "XDG_DATA_HOME");
	const char *home = getenv(envp, "HOME");
	u64 n = 0;
	int ok;
	if (set(airlockHome))
		ok = cat(sa->path, &n, airlockHome);
	else if (euid == 0)
		ok = cat(sa->path, &n, "/var/lib/airlock");
	else if (set(xdg))
		ok = cat(sa->path, &n, xdg) && cat(sa->path, &n, "/airlock");
	else if (set(home))
		ok = cat(sa->path, &n, home) && cat(sa->path, &n, "/.local/share/airlock");
	else
		return 0;
	return ok && clean(sa->path) && cat(sa->path, &n, "/sandbox.sock");
}

static u8 *putUvarint(u8 *p, u64 v) {
	while (v >= 0x80) {
		*p++ = (u8)(v | 0x80);
		v >>= 7;
	}
	*p++ = (u8)v;
	return p;
}

/* putStr writes a string's length and bytes at p, if they fit before end (0 if not). */
static u8 *putStr(u8 *p, u8 *end, const char *s) {
	u64 n = length(s);
	if (n > (u64)(end - p) || (u64)(end - p) - n < 10)
		return 0;
	p = putUvarint(p, n);
	for (u64 j = 0; j < n; j++)
		p[j] = (u8)s[j];
	return p + n;
}

/*
 * encode writes the framed request of words (handoff.EncodeRequest of a
 * Request with Words, Stdin when stdin is set, and Dir when dir is not 0)
 * into request and returns its length, or 0 when it would not fit. A
 * uvarint takes at most 10 bytes.
 */
static u64 encode(u8 *request, char **words, u64 count, int stdin, const char *dir) {
	u8 *p = request + 4, *end = request + MAX_REQUEST;
	*p++ = CODEC_VERSION;
	if (stdin)
		*p++ = FIELD_STDIN;
	*p++ = FIELD_WORDS;
	p = putUvarint(p, count);
	for (u64 i = 0; i < count && p; i++)
		p = putStr(p, end, words[i]);
	if (p && dir && *dir) {
		*p++ = FIELD_DIR;
		p = putStr(p, end, dir);
	}
	if (!p)
		return 0;
	u64 body = (u64)(p - request) - 4;
	request[0] = (u8)(body >> 24);
	request[1] = (u8)(body >> 16);
	request[2] = (u8)(body >> 8);
	request[3] = (u8)body;
	return body + 4;
}

/*
 * sendAll sends n bytes of p on socket fd; 0 on failure. MSG_NOSIGNAL: a
 * host gone is a fallback, not a SIGPIPE before Go's handlers exist.
 */
static int sendAll(int fd, const u8 *p, u64 n) {
	while (n > 0) {
		i64 w = sys6(SYS_sendto, fd, (i64)p, (i64)n, MSG_NOSIGNAL, 0, 0);
		if (w == -EINTR)
			continue;
		if (w <= 0)
			return 0;
		p += w;
		n -= (u64)w;
	}
	return 1;
}

/* say writes "airlock: " and the n bytes of text and a newline to stderr. */
static void say(const void *text, u64 n) {
	struct iovec iov[3] = {{"airlock: ", 9}, {text, n}, {"\n", 1}};
	sys3(SYS_writev, 2, (i64)iov, 3);
}

/* fmtUint writes v in decimal at p and returns the end. */
static char *fmtUint(char *p, u64 v) {
	char d[20];
	int n = 0;
	do {
		d[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = d[--n];
	return p;
}

/*
 * readFull reads n bytes from fd into p and returns how many it read before
 * the end of the stream (n: all), or -1 on an error.
 */
static i64 readFull(int fd, u8 *p, u64 n) {
	u64 got = 0;
	while (got < n) {
		i64 r = sys3(SYS_read, fd, (i64)(p + got), (i64)(n - got));
		if (r == -EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (u64)r;
	}
	return (i64)got;
}

/*
 * workdir returns the working directory as os.Getwd gives it, for the host
 * to read relative host paths in the words from (handoff.Request.Dir), or
 * 0: $PWD if it is absolute and names ".", else getcwd's answer into buf
 * (MAX_DIR bytes) if it is absolute (not "(unreachable)...").
 */
static const char *workdir(char **envp, char *buf) {
	const char *pwd = getenv(envp, "PWD");
	struct kstat dot, st;
	if (pwd && pwd[0] == '/' && sys3(SYS_stat, (i64)".", (i64)&dot, 0) == 0 &&
	    sys3(SYS_stat, (i64)pwd, (i64)&st, 0) == 0 && st.dev == dot.dev && st.ino == dot.ino)
		return pwd;
	if (sys3(SYS_getcwd, (i64)buf, MAX_DIR, 0) <= 0 || buf[0] != '/')
		return 0;
	return buf;
}

/*
 * asksStdin reports whether words may ask for stdin: -i or --interactive
 * before a "--" (the host decides, reading them as the front end would;
 * a pipe sent for words that do not ask is closed unread).
 */
static int asksStdin(char **words, u64 count) {
	for (u64 i = 0; i < count && !equal(words[i], "--"); i++)
		if (equal(words[i], "-i") || equal(words[i], "--interactive"))
			return 1;
	return 0;
}

/* What one reply said (package handoff's reply). */
struct reply {
	int started, stdin, reported, result, status;
	const u8 *error;
	u64 errorLen;
};

/* A cursor over a message; bad is set by the first malformed part. */
struct cur {
	const u8 *p, *end;
	int bad;
};

/* uvarint reads an unsigned varint in its one shortest form (execproto's). */
static u64 uvarint(struct cur *c) {
	u64 v = 0;
	for (int shift = 0; shift < 70 && c->p < c->end; shift += 7) {
		u8 b = *c->p++;
		if (shift == 63 && b > 1)
			break;
		v |= (u64)(b & 0x7f) << shift;
		if (b < 0x80) {
			if (b == 0 && shift > 0)
				break; /* not the shortest form */
			return v;
		}
	}
	c->bad = 1;
	return 0;
}

/*
 * parse decodes a reply's payload strictly, as handoff's decodeReply does
 * (the form's version, fields in increasing order, no zero value, no
 * unknown field); 0 means malformed.
 */
static int parse(const u8 *p, u64 n, struct reply *r) {
	struct cur c = {p, p + n, 0};
	if (n == 0 || *c.p++ != CODEC_VERSION)
		return 0;
	u64 last = 0;
	while (c.p < c.end && !c.bad) {
		u64 f = uvarint(&c);
		if (c.bad || f <= last)
			return 0;
		last = f;
		switch (f) {
		case 1:
			r->started = 1;
			break;
		case 2:
		case 3: {
			u64 len = uvarint(&c);
			if (c.bad || len > (u64)(c.end - c.p) || (f == 3 && len == 0))
				return 0;
			if (f == 3) {
				r->error = c.p;
				r->errorLen = len;
			} else {
				r->result = 1;
			}
			c.p += len;
			break;
		}
		case 4:
			r->reported = 1;
			break;
		case 5: {
			u64 u = uvarint(&c);
			i64 v = (i64)(u >> 1) ^ -(i64)(u & 1);
			if (c.bad || v == 0 || v != (int)v)
				return 0;
			r->status = (int)v;
			break;
		}
		case 6:
			r->stdin = 1;
			break;
		default:
			return 0;
		}
	}
	return !c.bad;
}

/*
 * readReply reads one framed reply. It returns 1 with r filled in, 0 at
 * the end of the stream between replies, and -1 for anything else; why,
 * when not 0, gets the Go client's words for what ended it.
 */
static int readReply(int fd, u8 *buf, struct reply *r, char *why, u64 *whyLen) {
	u8 h[4];
	char *w = why;
	i64 got = readFull(fd, h, 4);
	if (got == 0)
		return 0;
	if (got < 0)
		return -1;
	if (got < 4) {
		for (const char *s = "unexpected EOF"; *s; s++)
			*w++ = *s;
		*whyLen = (u64)(w - why);
		return -1;
	}
	u64 n = (u64)h[0] << 24 | (u64)h[1] << 16 | (u64)h[2] << 8 | h[3];
	if (n > MAX_REPLY) {
		for (const char *s = "malformed handoff message: "; *s; s++)
			*w++ = *s;
		w = fmtUint(w, n);
		for (const char *s = " bytes, at most 1048576"; *s; s++)
			*w++ = *s;
		*whyLen = (u64)(w - why);
		return -1;
	}
	got = readFull(fd, buf, n);
	if (got < 0)
		return -1;
	if ((u64)got < n) {
		for (const char *s = "malformed handoff message: cut short after "; *s; s++)
			*w++ = *s;
		w = fmtUint(w, (u64)got);
		for (const char *s = " of "; *s; s++)
			*w++ = *s;
		w = fmtUint(w, n);
		for (const char *s = " bytes: unexpected EOF"; *s; s++)
			*w++ = *s;
		*whyLen = (u64)(w - why);
		return -1;
	}
	struct reply z = {0, 0, 0, 0, 0, 0, 0};
	*r = z;
	return parse(buf, n, r) ? 1 : -2;
}

/* The signals forwarded to the command, as sandboxcli's catchSignals. */
#define FORWARDED ((1UL << (SIGINT - 1)) | (1UL << (SIGTERM - 1)) | (1UL << (SIGHUP - 1)) | (1UL << (SIGQUIT - 1)))

/*
 * finish waits for the command's status after the host said it started,
 * forwarding the signals, and exits with what the Go client would. With
 * in not -1 (the write end of the pipe the command reads, non-blocking),
 * it copies stdin into it through chunk until stdin ends (then closes it,
 * and the command reads the end) or the pipe's reader is gone, as
 * handoff.Start's copy does; a command that ends first ends the copy.
 */
static void __attribute__((noreturn)) finish(int s, int sfd, u8 *buf, int in, u8 *chunk) {
	static const char ended[] = "sandbox host: the connection ended before the command's result: ";
	static const char unexpected[] = "sandbox host: unexpected answer instead of the command's result";
	u64 have = 0, off = 0; /* chunk[off:have] is read from stdin, not yet written */
	for (;;) {
		struct pollfd fds[3] = {{s, POLLIN, 0}, {sfd, POLLIN, 0}, {-1, 0, 0}};
		if (in >= 0 && have) {
			fds[2].fd = in;
			fds[2].events = POLLOUT;
		} else if (in >= 0) {
			fds[2].fd = 0;
			fds[2].events = POLLIN;
		}
		i64 r = sys3(SYS_poll, (i64)fds, 3, -1);
		if (r == -EINTR)
			continue;
		if (r < 0)
			break;
		if (fds[2].revents && !have) {
			i64 n = sys3(SYS_read, 0, (i64)chunk, STDIN_CHUNK);
			if (n > 0) {
				have = (u64)n;
				off = 0;
			} else if (n != -EINTR && n != -EAGAIN) {
				/* The end of stdin (or an error of it): the command reads the end. */
				sys1(SYS_close, in);
				in = -1;
			}
		}
		if (fds[2].revents && in >= 0 && have) {
			i64 w = sys3(SYS_write, in, (i64)(chunk + off), (i64)(have - off));
			if (w > 0 && (off += (u64)w) == have) {
				have = 0;
			} else if (w <= 0 && w != -EINTR && w != -EAGAIN) {
				/* EPIPE (SIGPIPE is blocked): nobody reads the pipe any more. */
				sys1(SYS_close, in);
				in = -1;
				have = 0;
			}
		}
		if (sfd >= 0 && fds[1].revents) {
			/* struct signalfd_siginfo: 128 bytes, ssi_signo first. */
			u32 info[32];
			i64 n = sys3(SYS_read, sfd, (i64)info, sizeof info);
			if (n == (i64)sizeof info) {
				/* A control frame: field 1, the signal as a zigzag varint. */
				u8 frame[7] = {0, 0, 0, 3, CODEC_VERSION, 1, (u8)(info[0] << 1)};
				sys6(SYS_sendto, s, (i64)frame, sizeof frame, MSG_NOSIGNAL, 0, 0);
			}
		}
		if (!fds[0].revents)
			continue;
		struct reply rep;
		char why[128];
		u64 whyLen = 0;
		int k = readReply(s, buf, &rep, why, &whyLen);
		if (k == 0) {
			char msg[sizeof ended + 3];
			for (u64 i = 0; i < sizeof ended - 1; i++)
				msg[i] = ended[i];
			msg[sizeof ended - 1] = 'E';
			msg[sizeof ended] = 'O';
			msg[sizeof ended + 1] = 'F';
			say(msg, sizeof ended + 2);
			exit_group(125);
		}
		if (k == -1) {
			char msg[sizeof ended + sizeof why];
			u64 n = 0;
			for (; n < sizeof ended - 1; n++)
				msg[n] = ended[n];
			if (whyLen == 0) {
				for (const char *t = "read error"; *t; t++)
					msg[n++] = *t;
			}
			for (u64 i = 0; i < whyLen; i++)
				msg[n++] = why[i];
			say(msg, n);
			exit_group(125);
		}
		if (k == 1 && rep.error) {
			say(rep.error, rep.errorLen);
			exit_group(125);
		}
		if (k == 1 && rep.reported)
			exit_group(rep.status);
		say(unexpected, sizeof unexpected - 1);
		exit_group(125);
	}
	say(unexpected, sizeof unexpected - 1);
	exit_group(125);
}

/*
 * airlock_thin_main serves `airlock sandbox run WORDS...` from sp, the
 * stack the kernel started the process with (argc, argv, 0, envp, 0), or
 * returns for the Go runtime to run the command line.
 */
__attribute__((section(".text.entry"))) void airlock_thin_main(u64 *sp) {
	i64 argc = (i64)sp[0];
	char **argv = (char **)(sp + 1);
	char **envp = argv + argc + 1;
	/*
	 * Every `sandbox run WORDS...`: the sandbox host reads the words as the
	 * Go front end would, and leaves to it (no answer: a fallback) what
	 * it cannot read so, such as --image or a flag of airlock-host's.
	 */
	if (argc < 4 || !equal(argv[1], "sandbox") || !equal(argv[2], "run"))
		return;
	/* sandboxcli.DieWithParent, which cmd/airlock's init does for sandbox run. */
	i64 ppid = sys1(SYS_getppid, 0);
	sys6(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0);
	if (sys1(SYS_getppid, 0) != ppid)
		exit_group(125);
	if (set(getenv(envp, "AIRLOCK_NO_HANDOFF")) || set(getenv(envp, "AIRLOCK_TRACE")))
		return;
	u32 euid = (u32)sys1(SYS_geteuid, 0);
	struct sockaddr_un sa;
	sa.family = AF_UNIX;
	if (!socketPath(envp, euid, &sa))
		return;
	/*
	 * As the Go client (handoff.dial): talk only to a socket, and a host
	 * behind it, of this user, so that neither the command line nor the
	 * streams cross users.
	 */
	struct kstat st;
	if (sys3(SYS_stat, (i64)sa.path, (i64)&st, 0) < 0 || st.uid != euid)
		return;
	/*
	 * The request's buffer, then the replies': mapped, as the object has
	 * no .data or .bss (scripts/build-thin.sh links it into one block of
	 * code and constants), and untouched pages cost nothing.
	 */
	i64 mem = sys6(SYS_mmap, 0, MAX_REQUEST + MAX_REPLY, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem < 0 && mem > -4096)
		return;
	u8 *request = (u8 *)mem, *buf = request + MAX_REQUEST;
	/*
	 * Words that may ask for stdin (-i) go with the read end of a pipe,
	 * if this process has a stdin: the host says whether the command
	 * reads it, and then stdin is copied in (finish).
	 */
	int stdin = asksStdin(argv + 3, (u64)(argc - 3)) && sys3(SYS_fcntl, 0, F_GETFD, 0) >= 0;
	/* The reply's buffer holds the working directory until the request is made. */
	u64 reqLen = encode(request, argv + 3, (u64)(argc - 3), stdin, workdir(envp, (char *)buf));
	if (reqLen == 0)
		goto unmap;

	int s = (int)sys3(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		goto unmap;
	struct ucred cred;
	u32 credLen = sizeof cred;
	if (sys3(SYS_connect, s, (i64)&sa, sizeof sa) < 0 ||
	    sys6(SYS_getsockopt, s, SOL_SOCKET, SO_PEERCRED, (i64)&cred, (i64)&credLen, 0) < 0 || cred.uid != euid) {
		sys1(SYS_close, s);
		goto unmap;
	}

	/*
	 * The signals wait from here on: one that comes before the host's
	 * answer is forwarded once the command runs (or, on a fallback, taken
	 * as before when the mask is restored).
	 */
	u64 mask = FORWARDED, old = 0;
	sys6(SYS_rt_sigprocmask, SIG_BLOCK, (i64)&mask, (i64)&old, 8, 0, 0);

	/*
	 * The request with stdout and stderr, and the pipe's read end for
	 * stdin, in one message (handoff.Start). The host keeps a copy of the
	 * read end: this process's is closed once it is sent.
	 */
	int pipe[2] = {-1, -1};
	if (stdin && sys3(SYS_pipe2, (i64)pipe, O_CLOEXEC | O_NONBLOCK, 0) < 0)
		goto fallback;
	struct {
		u64 len;
		int level, type;
		int fds[3];
		int pad;
	} cm = {16 + 4 * (u64)(stdin ? 3 : 2), SOL_SOCKET, SCM_RIGHTS, {1, 2, pipe[0]}, 0};
	struct iovec iov = {request, reqLen};
	struct msghdr msg = {0, 0, &iov, 1, &cm, stdin ? 32 : 24, 0};
	i64 sent;
	do
		sent = sys3(SYS_sendmsg, s, (i64)&msg, MSG_NOSIGNAL);
	while (sent == -EINTR);
	if (stdin)
		sys1(SYS_close, pipe[0]);
	struct reply rep;
	char why[128];
	u64 whyLen;
	if (sent < 0 || !sendAll(s, request + sent, reqLen - (u64)sent) || readReply(s, buf, &rep, why, &whyLen) != 1)
		goto fallback;
	if (rep.error) {
		say(rep.error, rep.errorLen);
		exit_group(125);
	}
	if (rep.reported)
		exit_group(rep.status);
	if (!rep.started || rep.result || (rep.stdin && !stdin))
		goto fallback;
	if (!rep.stdin && stdin) {
		/* The words do not ask for stdin: the host closed its end unread. */
		sys1(SYS_close, pipe[1]);
		pipe[1] = -1;
	}
	int sfd = (int)sys6(SYS_signalfd4, -1, (i64)&mask, 8, SFD_CLOEXEC, 0, 0);
	if (sfd < 0) {
		/* Not forwarded, then: the signals act as they would have. */
		sys6(SYS_rt_sigprocmask, SIG_SETMASK, (i64)&old, 0, 8, 0, 0);
		sfd = -1;
	}
	if (rep.stdin) {
		/* A write to a pipe whose reader is gone is EPIPE, not the end of this process. */
		u64 pipeMask = 1UL << (SIGPIPE - 1);
		sys6(SYS_rt_sigprocmask, SIG_BLOCK, (i64)&pipeMask, 0, 8, 0, 0);
	}
	finish(s, sfd, buf, pipe[1], request);

fallback:
	if (stdin)
		sys1(SYS_close, pipe[1]);
	sys1(SYS_close, s);
	sys6(SYS_rt_sigprocmask, SIG_SETMASK, (i64)&old, 0, 8, 0, 0);
unmap:
	sys3(SYS_munmap, mem, MAX_REQUEST + MAX_REPLY, 0);
}
