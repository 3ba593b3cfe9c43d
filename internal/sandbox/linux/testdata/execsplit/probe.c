// probe MODE N [PATH]: N operations of one kind inside a sandbox, for
// BenchmarkGVisorExecSplit (built static and dynamic by the benchmark).
//
//	fork N        fork; the child _exits; the parent waits for it
//	spawn N PATH  vfork; the child execs PATH; the parent waits for it
//	chain N       exec itself N times: exec alone, no fork, no wait
//	getppid N     N system calls
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	long n = atol(argv[2]);
	if (!strcmp(argv[1], "fork")) {
		for (long i = 0; i < n; i++) {
			pid_t p = fork();
			if (p == 0)
				_exit(0);
			if (p < 0 || waitpid(p, NULL, 0) != p)
				return 1;
		}
	} else if (!strcmp(argv[1], "spawn") && argc > 3) {
		char *av[] = {argv[3], NULL};
		for (long i = 0; i < n; i++) {
			pid_t p = vfork();
			if (p == 0) {
				execv(argv[3], av);
				_exit(127);
			}
			int st;
			if (p < 0 || waitpid(p, &st, 0) != p || st != 0)
				return 1;
		}
	} else if (!strcmp(argv[1], "chain")) {
		if (n > 0) {
			char buf[32];
			snprintf(buf, sizeof buf, "%ld", n - 1);
			char *av[] = {argv[0], argv[1], buf, NULL};
			execv(argv[0], av);
			return 1;
		}
	} else if (!strcmp(argv[1], "getppid")) {
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
	} else
		return 2;
	return 0;
}
