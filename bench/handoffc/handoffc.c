/*
 * handoffc is a MEASURING PROTOTYPE, not a product client: a warm
 * `airlock sandbox run` written in C, so that bench/compare.sh can time the
 * sandbox daemon's side of the warm path without a Go process's start on the
 * client's side (issue 29). It hands one command to a running
 * `airlock sandbox daemon` as the Go front end does (package handoff): it
 * checks that $AIRLOCK_HOME/sandbox.sock and the process behind it are this
 * user's, sends the request that bench/handoffreq recorded (built by the
 * front end's own functions) with its standard output and error as
 * descriptors, in one sendmsg, reads the two framed replies (4 bytes of
 * length, big-endian, then the message) and exits with the command's exit
 * status, mapped as sandbox.Result.ExitStatus maps it.
 *
 * What it leaves out, being a prototype: the fallback to a sandbox of its own
 * when no daemon answers (it exits 125), stdin (-i), the forwarding of
 * signals to the command, --json, and an error reply's words beyond printing
 * them. The recorded request holds the command line: record it again to run
 * another command.
 *
 * Usage: handoffc REQUEST-FILE
 * Build: cc -O2 -static -o handoffc handoffc.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The execproto binary form's version, the first byte of every message. */
#define CODEC_VERSION 1
/* The largest reply read (package handoff's maxReply). */
#define MAX_REPLY (1 << 20)
/* The largest request sent (package handoff's maxRequest). */
#define MAX_REQUEST (8 << 20)

static void fail(const char *what) {
	fprintf(stderr, "handoffc: %s: %s\n", what, strerror(errno));
	exit(125);
}

static void failx(const char *what) {
	fprintf(stderr, "handoffc: %s\n", what);
	exit(125);
}

/* readFull reads exactly n bytes, or exits. */
static void readFull(int fd, unsigned char *p, size_t n) {
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			fail("read a reply");
		if (r == 0)
			failx("the sandbox host closed the connection before its answer");
		p += r;
		n -= (size_t)r;
	}
}

/*
 * readFrame reads one framed reply into a buffer it allocates and returns its
 * length in *n.
 */
static unsigned char *readFrame(int fd, size_t *n) {
	unsigned char h[4];
	readFull(fd, h, 4);
	uint32_t len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
	if (len == 0 || len > MAX_REPLY)
		failx("a reply of a bad length");
	unsigned char *p = malloc(len);
	if (p == NULL)
		failx("out of memory");
	readFull(fd, p, len);
	*n = len;
	return p;
}

/* A cursor over a message's bytes. */
struct cur {
	const unsigned char *p, *end;
};

/* uvarint reads an unsigned varint (encoding/binary's), or exits. */
static uint64_t uvarint(struct cur *c) {
	uint64_t v = 0;
	for (int shift = 0; shift < 64 && c->p < c->end; shift += 7) {
		unsigned char b = *c->p++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (b < 0x80)
			return v;
	}
	failx("a malformed varint in a reply");
	return 0;
}

/* varint reads a signed (zigzag) varint. */
static int64_t varint(struct cur *c) {
	uint64_t u = uvarint(c);
	return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

/* bytes reads a length and returns a cursor over that many bytes. */
static struct cur bytes(struct cur *c) {
	uint64_t n = uvarint(c);
	if (n > (uint64_t)(c->end - c->p))
		failx("a field longer than its reply");
	struct cur s = {c->p, c->p + n};
	c->p += n;
	return s;
}

static int is(struct cur s, const char *word) {
	size_t n = strlen(word);
	return (size_t)(s.end - s.p) == n && memcmp(s.p, word, n) == 0;
}

/*
 * exitStatus decodes a sandbox.Result (package handoff's appendResult:
 * 1 outcome, 2 exit code, 3 signal, 4 not-started, 5 message, 6 usage,
 * 7 fingerprint) and maps it as sandbox.Result.ExitStatus does.
 */
static int exitStatus(struct cur r) {
	struct cur outcome = {0, 0};
	int64_t code = 0, sig = 0;
	while (r.p < r.end) {
		switch (uvarint(&r)) {
		case 1:
			outcome = bytes(&r);
			break;
		case 2:
			code = varint(&r);
			break;
		case 3:
			sig = varint(&r);
			break;
		case 4:
		case 5:
		case 6:
		case 7:
			bytes(&r);
			break;
		default:
			failx("an unknown field in the result");
		}
	}
	if (is(outcome, "exited"))
		return (int)code;
	if (is(outcome, "signaled"))
		return 128 + (int)sig;
	if (is(outcome, "timeout"))
		return 124;
	if (is(outcome, "disk_full") && sig == 0 && code > 0 && code < 128)
		return (int)code;
	if (is(outcome, "oom") || is(outcome, "pids_limit") || is(outcome, "output_limit") || is(outcome, "disk_full"))
		return 137;
	return 125;
}

/*
 * reply decodes one reply (1 started, 2 result, 3 error): it returns 1 for
 * "started", or stores the result's exit status in *status and returns 2; an
 * error reply is printed and ends the process.
 */
static int reply(const unsigned char *p, size_t n, int *status) {
	struct cur c = {p, p + n};
	if (*c.p++ != CODEC_VERSION)
		failx("a reply of another protocol form");
	int kind = 0;
	while (c.p < c.end) {
		struct cur s;
		switch (uvarint(&c)) {
		case 1:
			kind = 1;
			break;
		case 2:
			*status = exitStatus(bytes(&c));
			kind = 2;
			break;
		case 3:
			s = bytes(&c);
			fprintf(stderr, "airlock: %.*s\n", (int)(s.end - s.p), s.p);
			exit(125);
		default:
			failx("an unknown field in a reply");
		}
	}
	return kind;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: handoffc REQUEST-FILE (written by bench/handoffreq)\n");
		return 2;
	}
	/* The Go front end dies with its parent too (sandboxcli.DieWithParent). */
	pid_t ppid = getppid();
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (getppid() != ppid)
		return 125;

	int f = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (f < 0)
		fail(argv[1]);
	struct stat fst;
	if (fstat(f, &fst) < 0)
		fail(argv[1]);
	if (fst.st_size < 5 || fst.st_size > MAX_REQUEST)
		failx("the request file is not a recorded request");
	size_t reqLen = (size_t)fst.st_size;
	unsigned char *req = malloc(reqLen);
	if (req == NULL)
		failx("out of memory");
	for (size_t got = 0; got < reqLen;) {
		ssize_t r = read(f, req + got, reqLen - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			fail(argv[1]);
		got += (size_t)r;
	}
	close(f);

	const char *home = getenv("AIRLOCK_HOME");
	if (home == NULL || *home == 0)
		failx("AIRLOCK_HOME is not set (the prototype knows no default home)");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (snprintf(sa.sun_path, sizeof sa.sun_path, "%s/sandbox.sock", home) >= (int)sizeof sa.sun_path)
		failx("the socket's path is too long");

	/*
	 * As the Go client does: talk only to a socket, and a host behind it, of
	 * this user, so that neither the request nor the streams cross users.
	 */
	uid_t me = geteuid();
	struct stat sst;
	if (stat(sa.sun_path, &sst) < 0 || sst.st_uid != me)
		failx("no sandbox host of this user (the prototype does not start a sandbox itself)");
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		fail("socket");
	if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0)
		fail("connect to the sandbox host");
	struct ucred cred;
	socklen_t cl = sizeof cred;
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != me)
		failx("the sandbox host is another user's");

	/* The whole request and the command's stdout and stderr, at once. */
	int fds[2] = {1, 2};
	union {
		char buf[CMSG_SPACE(sizeof fds)];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct iovec iov = {.iov_base = req, .iov_len = reqLen};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof fds);
	memcpy(CMSG_DATA(cm), fds, sizeof fds);
	ssize_t sent = sendmsg(s, &msg, MSG_NOSIGNAL);
	if (sent < 0)
		fail("send the request");
	/* A large request (a spec with many CAs) may not fit the socket's buffer at once. */
	for (size_t off = (size_t)sent; off < reqLen;) {
		ssize_t w = write(s, req + off, reqLen - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			fail("send the request");
		off += (size_t)w;
	}

	int status = 125;
	size_t n;
	unsigned char *p = readFrame(s, &n);
	if (reply(p, n, &status) != 1)
		failx("an unexpected answer to a command");
	free(p);
	p = readFrame(s, &n);
	if (reply(p, n, &status) != 2)
		failx("an unexpected answer instead of the command's result");
	return status;
}
