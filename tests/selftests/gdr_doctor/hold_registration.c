// SPDX-License-Identifier: GPL-2.0
/*
 * hold_registration SIZE COMMAND [ARG...]: runs COMMAND while one memory registration of SIZE bytes
 * of GPU memory is live, as an application between ibv_reg_mr and ibv_dereg_mr holds one: GPU
 * memory from the nvidia_p2p stand-in (cudaMalloc), registered through the peer-memory host
 * stand-in (ibv_reg_mr), so that the loaded peer-memory client pins it. After COMMAND it deregisters
 * and frees the memory, and exits with COMMAND's status; 125 when the registration could not be
 * made or undone, with the reason on stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpumem.h"
#include "pmh.h"

#define SETUP_FAILED 125

int main(int argc, char **argv)
{
	struct pmh_reg_mr mr;
	size_t size;
	__u64 handle;
	int gpu, host, ret, status;
	char *end;
	void *va;
	pid_t pid;

	if (argc < 3) {
		fprintf(stderr, "usage: %s SIZE COMMAND [ARG...]\n", argv[0]);
		return SETUP_FAILED;
	}
	size = strtoul(argv[1], &end, 0);
	if (*end || !size) {
		fprintf(stderr, "hold_registration: %s is not a size\n", argv[1]);
		return SETUP_FAILED;
	}
	gpu = gpu_open();
	host = pmh_open();
	if (gpu < 0 || host < 0) {
		fprintf(stderr, "hold_registration: open: GPU stand-in %s, host stand-in %s\n",
			gpu < 0 ? strerror(-gpu) : "ok", host < 0 ? strerror(-host) : "ok");
		return SETUP_FAILED;
	}
	va = gpu_alloc(gpu, size, &handle);
	if (!va) {
		perror("hold_registration: GPU allocation");
		return SETUP_FAILED;
	}
	ret = pmh_reg(host, va, size, PMH_REG_WRITE, &mr);
	if (ret) {
		fprintf(stderr, "hold_registration: registration of %zu bytes: %s\n", size,
			strerror(-ret));
		return SETUP_FAILED;
	}
	fprintf(stderr, "hold_registration: %zu bytes of GPU memory registered\n", size);
	fflush(NULL);

	pid = fork();
	if (pid == 0) {
		execvp(argv[2], argv + 2);
		perror(argv[2]);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		perror("hold_registration: running the command");
		return SETUP_FAILED;
	}

	ret = pmh_dereg(host, mr.handle);
	if (!ret)
		ret = gpu_free(gpu, handle);
	close(host);
	close(gpu);
	if (ret) {
		fprintf(stderr, "hold_registration: undoing the registration: %s\n", strerror(-ret));
		return SETUP_FAILED;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
