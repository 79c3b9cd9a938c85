/* lib-probe: calls one function of lib/ on the command line's arguments or
 * stdin and prints what it returned, for tests/test_lib.py.
 *
 *   number TEXT UNITS MIN MAX   parse_number (UNITS: count or size)
 *   option TEXT UNITS MIN MAX   number_option as "--opt"
 *   json                        json_string of stdin's bytes
 *   json-null                   json_puts_or_null of NULL
 *   escape                      escape_bytes of stdin's bytes
 *   mount MAJ:MIN               mount_of_dev: point, source, fstype
 *   array COUNT ITEM_SIZE       array_reserve one item at a time
 *   cgroups                     cgroup_live_ids, one id a line */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "array.h"
#include "cgroup.h"
#include "errmsg.h"
#include "escape.h"
#include "json.h"
#include "mountinfo.h"
#include "option.h"
#include "size.h"

static const struct number_units *units_of(const char *name)
{
	return strcmp(name, "size") == 0 ? &size_units : NULL;
}

static int number(char **argv)
{
	uint64_t value = 0;
	int ret = parse_number(argv[0], units_of(argv[1]),
			       strtoull(argv[2], NULL, 10),
			       strtoull(argv[3], NULL, 10), &value);

	if (ret == 0)
		printf("%llu\n", (unsigned long long)value);
	else
		puts(ret == NUMBER_SYNTAX ? "syntax" : "range");
	return 0;
}

static int option(char **argv)
{
	printf("%llu\n", (unsigned long long)number_option(
		       "--opt", argv[0], units_of(argv[1]),
		       strtoull(argv[2], NULL, 10),
		       strtoull(argv[3], NULL, 10)));
	return 0;
}

/* All of stdin, in *LEN bytes. */
static char *read_stdin(size_t *len)
{
	char *data = NULL;
	size_t cap = 0, got;

	*len = 0;
	do {
		if (array_reserve(&data, &cap, *len + 4096, 1) < 0)
			exit(1);
		got = fread(data + *len, 1, 4096, stdin);
		*len += got;
	} while (got > 0);
	return data;
}

static int bytes(const char *what)
{
	size_t len;
	char *data = read_stdin(&len), *escaped;

	if (strcmp(what, "json") == 0) {
		json_string(stdout, data, len);
	} else {
		escaped = escape_bytes(data, len);
		if (!escaped)
			return 1;
		fputs(escaped, stdout);
		free(escaped);
	}
	free(data);
	return 0;
}

static int mount(const char *dev)
{
	unsigned int major_, minor_;
	struct mount_copy m;
	int found;

	if (sscanf(dev, "%u:%u", &major_, &minor_) != 2)
		return 2;
	found = mount_of_dev(makedev(major_, minor_), &m);
	if (found < 0)
		return 1;
	if (found)
		printf("%s\t%s\t%s\n", m.point, m.source, m.fstype);
	else
		puts("none");
	return 0;
}

/* One item at a time, as a reader of records grows its array: prints the
 * capacities it went through, or "fails at N" where array_reserve()
 * refused (the array left as it was). */
static int array(const char *count_text, const char *size_text)
{
	size_t count = strtoull(count_text, NULL, 10);
	size_t size = strtoull(size_text, NULL, 10), cap = 0, last = 0;
	char *items = NULL;

	for (size_t n = 1; n <= count; n++) {
		if (array_reserve(&items, &cap, n, size) < 0) {
			printf("fails at %zu, capacity %zu\n", n, cap);
			free(items);
			return 0;
		}
		if (cap != last)
			printf("%zu\n", cap);
		last = cap;
		memset(items + (n - 1) * size, 0xa5, size);
	}
	free(items);
	return 0;
}

static int cgroups(void)
{
	__u64 *ids;
	long n = cgroup_live_ids(&ids);

	if (n < 0)
		return 1;
	for (long i = 0; i < n; i++)
		printf("%llu\n", (unsigned long long)ids[i]);
	free(ids);
	return 0;
}

int main(int argc, char **argv)
{
	errmsg_init("lib-probe");
	if (argc == 6 && strcmp(argv[1], "number") == 0)
		return number(argv + 2);
	if (argc == 6 && strcmp(argv[1], "option") == 0)
		return option(argv + 2);
	if (argc == 2 && (strcmp(argv[1], "json") == 0 ||
			  strcmp(argv[1], "escape") == 0))
		return bytes(argv[1]);
	if (argc == 2 && strcmp(argv[1], "json-null") == 0) {
		json_puts_or_null(stdout, NULL);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "mount") == 0)
		return mount(argv[2]);
	if (argc == 4 && strcmp(argv[1], "array") == 0)
		return array(argv[2], argv[3]);
	if (argc == 2 && strcmp(argv[1], "cgroups") == 0)
		return cgroups();
	errmsg(NULL, "usage: see tests/lib_probe.c");
	return 2;
}
