// SPDX-License-Identifier: GPL-2.0
/* userdb.h: the user database, through NSS or read from /etc directly. */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "userdb.h"

#ifdef PAGETRACE_STATIC
#define PASSWD_FILE "/etc/passwd"
#define GROUP_FILE "/etc/group"
#define MAX_GROUPS 1024

/* Split @line at ':' into at most @max fields; the number found. */
static int split_fields(char *line, char **fields, int max)
{
	int n = 0;

	line[strcspn(line, "\n")] = '\0';
	while (n < max) {
		fields[n++] = line;
		line = strchr(line, ':');
		if (!line)
			break;
		*line++ = '\0';
	}
	return n;
}

/* The decimal id of @text; -1 if it is not one. */
static long long parse_id(const char *text)
{
	char *end;
	long long id;

	errno = 0;
	id = strtoll(text, &end, 10);
	if (errno || end == text || *end || id < 0 || id > 0xfffffffeLL)
		return -1;
	return id;
}

/* Every line of /etc/passwd, until one matches @name or (name NULL) @uid. */
static int passwd_lookup(const char *name, uid_t uid, struct userdb_user *out)
{
	char line[4096], *f[7];
	FILE *file = fopen(PASSWD_FILE, "re");
	int found = 0;

	if (!file)
		return -1;
	while (!found && fgets(line, sizeof(line), file)) {
		long long u, g;

		if (split_fields(line, f, 7) != 7)
			continue;
		u = parse_id(f[2]);
		g = parse_id(f[3]);
		if (u < 0 || g < 0 || (name ? strcmp(f[0], name) : (uid_t)u != uid))
			continue;
		snprintf(out->name, sizeof(out->name), "%s", f[0]);
		snprintf(out->home, sizeof(out->home), "%s", f[5]);
		out->uid = (uid_t)u;
		out->gid = (gid_t)g;
		found = 1;
	}
	fclose(file);
	if (!found)
		errno = ENOENT;
	return found ? 0 : -1;
}

/* Is @name in the comma-separated @members? */
static int is_member(const char *name, char *members)
{
	char *save = NULL;

	for (char *m = strtok_r(members, ",", &save); m; m = strtok_r(NULL, ",", &save))
		if (strcmp(m, name) == 0)
			return 1;
	return 0;
}

/* @gid and the groups of /etc/group that list @name; their number. */
static int group_list(const char *name, gid_t gid, gid_t *groups)
{
	char line[16384], *f[4];
	FILE *file = fopen(GROUP_FILE, "re");
	int n = 0;

	groups[n++] = gid;
	if (!file)
		return n;	/* no /etc/group: the primary group only */
	while (n < MAX_GROUPS && fgets(line, sizeof(line), file)) {
		long long g;

		if (split_fields(line, f, 4) != 4 || (g = parse_id(f[2])) < 0 ||
		    (gid_t)g == gid || !is_member(name, f[3]))
			continue;
		groups[n++] = (gid_t)g;
	}
	fclose(file);
	return n;
}

int userdb_by_name(const char *name, struct userdb_user *out)
{
	return passwd_lookup(name, 0, out);
}

int userdb_by_uid(uid_t uid, struct userdb_user *out)
{
	return passwd_lookup(NULL, uid, out);
}

int userdb_become(const struct userdb_user *user)
{
	gid_t groups[MAX_GROUPS];
	int n = group_list(user->name, user->gid, groups);

	if (setgroups((size_t)n, groups) || setgid(user->gid) || setuid(user->uid))
		return -1;
	return 0;
}

#else

static int from_passwd(const struct passwd *pw, struct userdb_user *out)
{
	if (!pw) {
		errno = ENOENT;	/* NSS's errno after a miss is not reliable */
		return -1;
	}
	snprintf(out->name, sizeof(out->name), "%s", pw->pw_name);
	snprintf(out->home, sizeof(out->home), "%s", pw->pw_dir);
	out->uid = pw->pw_uid;
	out->gid = pw->pw_gid;
	return 0;
}

int userdb_by_name(const char *name, struct userdb_user *out)
{
	return from_passwd(getpwnam(name), out);
}

int userdb_by_uid(uid_t uid, struct userdb_user *out)
{
	return from_passwd(getpwuid(uid), out);
}

int userdb_become(const struct userdb_user *user)
{
	if (initgroups(user->name, user->gid) || setgid(user->gid) || setuid(user->uid))
		return -1;
	return 0;
}

#endif
