/* The user a tool runs a command as (-u USER, SUDO_UID): looked up through
 * NSS (getpwnam, getpwuid, initgroups) in the normal build; in the static
 * build (-DPAGETRACE_STATIC) read from /etc/passwd and /etc/group
 * directly, since a static glibc reaches NSS only by loading the host's
 * libnss_*.so of the host's own glibc. The static build thus knows the
 * users of the files, not those of LDAP or SSSD. */
#ifndef PAGETRACE_USERDB_H
#define PAGETRACE_USERDB_H

#include <limits.h>
#include <sys/types.h>

struct userdb_user {
	char name[256];
	uid_t uid;
	gid_t gid;
	char home[PATH_MAX];
};

/* 0 and *out filled, or -1 with errno (ENOENT: no such user). */
int userdb_by_name(const char *name, struct userdb_user *out);
int userdb_by_uid(uid_t uid, struct userdb_user *out);
/* Become @user: its groups (primary and supplementary), then its uid. */
int userdb_become(const struct userdb_user *user);

#endif
