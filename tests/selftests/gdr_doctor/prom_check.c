// SPDX-License-Identifier: GPL-2.0
/*
 * prom_check: reads Prometheus text exposition (format 0.0.4) on stdin, checks it against the rules
 * in docs/prometheus-text-format.md, and prints every sample in one canonical form
 *
 *	name{label="value",...} value
 *
 * with the labels sorted by name and their values unescaped and re-escaped, so that a test can
 * look for a sample's value without depending on how the writer spelled it. On the first
 * violation it prints "prom_check: line N: <what>" on stderr and exits 1.
 *
 * It is written apart from gdr-doctor's writer (crates/gdr-doctor/src/prometheus.rs) so that the
 * two do not share a misunderstanding of the format; the host tests run both it and a third-party
 * parser on the same output.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FAMILIES 512
#define MAX_SERIES 8192
#define MAX_LABELS 16
#define MAX_TEXT 1024
#define LINE_MAX_TEXT (16 * MAX_TEXT)

struct family {
	char name[MAX_TEXT];
	char type[16];	/* "" until a TYPE line names it */
	int has_help;
	int started;	/* a sample of it was seen */
	int closed;	/* another family's sample came after its samples */
};

struct label {
	char name[MAX_TEXT];
	char value[MAX_TEXT];	/* unescaped */
};

static struct family families[MAX_FAMILIES];
static int n_families;
static char *series[MAX_SERIES];
static int n_series;
static int current = -1;	/* the family whose samples are being read */
static long lineno;

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "prom_check: line %ld: ", lineno);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static int is_name_start(int c, int colon)
{
	return isalpha(c) || c == '_' || (colon && c == ':');
}

static int is_name_char(int c, int colon)
{
	return isalnum(c) || c == '_' || (colon && c == ':');
}

/* Reads a metric name (colon 1) or label name (colon 0) at *p into out; advances *p. */
static void read_name(const char **p, char *out, int colon, const char *what)
{
	size_t n = 0;

	if (!is_name_start((unsigned char)**p, colon))
		fail("%s does not start with a letter or '_': \"%.40s\"", what, *p);
	while (is_name_char((unsigned char)**p, colon)) {
		if (n + 1 >= MAX_TEXT)
			fail("%s too long", what);
		out[n++] = *(*p)++;
	}
	out[n] = 0;
}

static struct family *find_family(const char *name)
{
	for (int i = 0; i < n_families; i++)
		if (!strcmp(families[i].name, name))
			return &families[i];
	return NULL;
}

static struct family *new_family(const char *name)
{
	struct family *f;

	if (n_families == MAX_FAMILIES)
		fail("more than %d metric families", MAX_FAMILIES);
	f = &families[n_families++];
	snprintf(f->name, sizeof(f->name), "%s", name);
	return f;
}

/* The family a sample of this name belongs to: its own, or a histogram's or summary's. */
static struct family *family_of(const char *name)
{
	static const char *const suffixes[] = { "_bucket", "_sum", "_count" };
	struct family *f = find_family(name);

	if (f && f->type[0])
		return f;
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t n = strlen(name), s = strlen(suffixes[i]);
		char base[MAX_TEXT];
		struct family *b;

		if (n <= s || strcmp(name + n - s, suffixes[i]))
			continue;
		snprintf(base, sizeof(base), "%.*s", (int)(n - s), name);
		b = find_family(base);
		if (b && (!strcmp(b->type, "histogram") || !strcmp(b->type, "summary")) &&
		    (strcmp(suffixes[i], "_bucket") || !strcmp(b->type, "histogram")))
			return b;
	}
	return f ? f : new_family(name);
}

/* HELP text: "\\" and "\n" are the only escapes. */
static void check_help(const char *s)
{
	for (; *s; s++)
		if (*s == '\\' && s[1] != '\\' && s[1] != 'n')
			fail("HELP text has an escape other than \\\\ and \\n");
		else if (*s == '\\')
			s++;
}

static void descriptor(const char *p)
{
	char kind[8], name[MAX_TEXT];
	struct family *f;

	/* "# HELP name text" or "# TYPE name type"; any other comment is ignored. */
	while (*p == ' ' || *p == '\t')
		p++;
	if (strncmp(p, "HELP ", 5) && strncmp(p, "TYPE ", 5))
		return;
	memcpy(kind, p, 4);
	kind[4] = 0;
	p += 5;
	while (*p == ' ' || *p == '\t')
		p++;
	read_name(&p, name, 1, "the metric name of a descriptor");
	f = find_family(name);
	if (!f)
		f = new_family(name);
	if (f->started)
		fail("%s of %s after its samples", kind, name);
	if (!strcmp(kind, "HELP")) {
		if (f->has_help)
			fail("a second HELP for %s", name);
		if (*p && *p != ' ' && *p != '\t')
			fail("HELP name %s runs into its text", name);
		check_help(p);
		f->has_help = 1;
		return;
	}
	if (f->type[0])
		fail("a second TYPE for %s", name);
	if (*p != ' ' && *p != '\t')
		fail("TYPE %s without a type", name);
	while (*p == ' ' || *p == '\t')
		p++;
	if (strcmp(p, "counter") && strcmp(p, "gauge") && strcmp(p, "histogram") &&
	    strcmp(p, "summary") && strcmp(p, "untyped"))
		fail("TYPE %s has an unknown type \"%s\"", name, p);
	snprintf(f->type, sizeof(f->type), "%s", p);
}

/* A label value in double quotes at *p: \\, \" and \n are its escapes. */
static void read_value(const char **p, char *out)
{
	size_t n = 0;

	if (**p != '"')
		fail("a label value not in double quotes");
	(*p)++;
	for (;;) {
		char c = *(*p)++;

		if (!c)
			fail("a label value without its closing quote");
		if (c == '"')
			break;
		if (c == '\\') {
			c = *(*p)++;
			if (c == 'n')
				c = '\n';
			else if (c != '\\' && c != '"')
				fail("a label value with the escape \\%c", c ? c : '0');
		}
		if (n + 1 >= MAX_TEXT)
			fail("a label value too long");
		out[n++] = c;
	}
	out[n] = 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct label *)a)->name, ((const struct label *)b)->name);
}

/* A sample value: a float as Go's ParseFloat reads it, or NaN, +Inf, -Inf. */
static double read_number(const char *tok)
{
	char *end;
	double v;

	if (!strcmp(tok, "NaN") || !strcmp(tok, "+Inf") || !strcmp(tok, "-Inf") || !strcmp(tok, "Inf"))
		return strtod(tok, NULL);
	for (const char *c = tok; *c; c++)
		if (!isdigit((unsigned char)*c) && !strchr("+-.eE", *c))
			fail("value \"%s\" is not a number", tok);
	errno = 0;
	v = strtod(tok, &end);
	if (end == tok || *end || errno)
		fail("value \"%s\" is not a number", tok);
	return v;
}

static void print_escaped(const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			putchar('\\');
		if (*s == '\n') {
			fputs("\\n", stdout);
			continue;
		}
		putchar(*s);
	}
}

static void sample(const char *p)
{
	struct label labels[MAX_LABELS];
	/* The key holds the name and every label (at most a line's worth of text, plus separators). */
	char name[MAX_TEXT], key[LINE_MAX_TEXT + 4 * MAX_LABELS], value[64];
	size_t used;
	int n_labels = 0;
	struct family *f;
	size_t len;
	double v;

	read_name(&p, name, 1, "a metric name");
	if (*p == '{') {
		p++;
		while (*p != '}') {
			if (n_labels == MAX_LABELS)
				fail("%s has more than %d labels", name, MAX_LABELS);
			read_name(&p, labels[n_labels].name, 0, "a label name");
			if (!strncmp(labels[n_labels].name, "__", 2))
				fail("label %s is reserved (starts with __)", labels[n_labels].name);
			if (*p++ != '=')
				fail("label %s without '='", labels[n_labels].name);
			read_value(&p, labels[n_labels].value);
			for (int i = 0; i < n_labels; i++)
				if (!strcmp(labels[i].name, labels[n_labels].name))
					fail("label %s twice in one sample", labels[i].name);
			n_labels++;
			if (*p == ',')
				p++;
			else if (*p != '}')
				fail("labels of %s not separated by ','", name);
		}
		p++;
	}
	if (*p != ' ' && *p != '\t')
		fail("%s: no space before its value", name);
	while (*p == ' ' || *p == '\t')
		p++;
	len = strcspn(p, " \t");
	if (!len || len >= sizeof(value))
		fail("%s: no value", name);
	memcpy(value, p, len);
	value[len] = 0;
	v = read_number(value);
	p += len;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p) {	/* a timestamp: an integer of milliseconds */
		const char *t = *p == '-' ? p + 1 : p;

		if (!*t || strspn(t, "0123456789") != strlen(t))
			fail("%s: \"%s\" is not a timestamp", name, p);
	}

	f = family_of(name);
	if (f->closed)
		fail("%s: its family %s's samples are not together", name, f->name);
	if (current >= 0 && &families[current] != f)
		families[current].closed = 1;
	current = (int)(f - families);
	f->started = 1;
	if (!f->has_help || !f->type[0])
		fail("%s: family %s has no %s line before its samples", name, f->name,
		     f->has_help ? "TYPE" : "HELP");
	if (!strcmp(f->type, "counter") && !(v >= 0))
		fail("%s: counter value %s is negative or NaN", name, value);

	qsort(labels, n_labels, sizeof(labels[0]), by_name);
	used = (size_t)snprintf(key, sizeof(key), "%s", name);
	for (int i = 0; i < n_labels && used < sizeof(key); i++)
		used += (size_t)snprintf(key + used, sizeof(key) - used, "\x1f%s\x1e%s",
					 labels[i].name, labels[i].value);
	if (used >= sizeof(key))
		fail("%s: its labels are too long", name);
	for (int i = 0; i < n_series; i++)
		if (!strcmp(series[i], key))
			fail("%s: a second sample with the same labels", name);
	if (n_series == MAX_SERIES)
		fail("more than %d samples", MAX_SERIES);
	series[n_series++] = strdup(key);

	fputs(name, stdout);
	if (n_labels) {
		putchar('{');
		for (int i = 0; i < n_labels; i++) {
			printf("%s%s=\"", i ? "," : "", labels[i].name);
			print_escaped(labels[i].value);
			putchar('"');
		}
		putchar('}');
	}
	printf(" %s\n", value);
}

int main(void)
{
	static char line[LINE_MAX_TEXT];
	long samples = 0;

	while (fgets(line, sizeof(line), stdin)) {
		size_t n = strlen(line);

		lineno++;
		if (!n || line[n - 1] != '\n')
			fail("line too long, or the last line without its line feed");
		line[n - 1] = 0;
		if (strchr(line, '\r'))
			fail("a carriage return");
		if (!line[0])
			continue;
		if (line[0] == '#') {
			descriptor(line + 1);
			continue;
		}
		sample(line);
		samples++;
	}
	if (!samples) {
		lineno = 0;
		fail("no samples");
	}
	return 0;
}
