/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small files of sysfs, debugfs and procfs: the one set of helpers every selftest uses.
 * Header-only, libc only.
 */
#ifndef PEERMEM_SELFTESTS_FILES_H
#define PEERMEM_SELFTESTS_FILES_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The contents of a small text file, without trailing newlines and spaces. 0 or -errno. */
static inline int read_text(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

/* Writes @text in one write(). 0 or -errno (the file's own answer, as -EBUSY). */
static inline int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	close(fd);
	return n < 0 ? -errno : 0;
}

/* The number a file holds (decimal, or 0x hex); LLONG_MIN when it cannot be read. */
static inline long long read_number(const char *path)
{
	char buf[64];

	if (read_text(path, buf, sizeof(buf)) || !buf[0])
		return LLONG_MIN;
	return strtoll(buf, NULL, 0);
}

/*
 * In a file of "NAME NUMBER [NUMBER]" lines (peermem-rs's debugfs stats and time files, up to
 * 16 KiB): the line NAME, its first number in *@first and its second, if @second, in *@second
 * (0 when the line has none). 1 found, 0 no such line, -errno when the file cannot be read.
 */
static inline int read_named(const char *path, const char *name, long long *first, long long *second)
{
	char buf[16384], *line, *end, *save;
	size_t len = strlen(name);
	int rc = read_text(path, buf, sizeof(buf));

	if (rc)
		return rc;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, name, len) || line[len] != ' ')
			continue;
		*first = strtoll(line + len + 1, &end, 10);
		if (second)
			*second = strtoll(end, NULL, 10);
		return 1;
	}
	return 0;
}

#endif
