/*
 * mmap-contend [--remap | --threads | --unmap] FILE: maps FILE, touches its page 3, then one page
 * in every 32 (fault-around maps 16 around each, so each touch is a fault
 * of its own) while a second thread maps and unmaps anonymous memory in a
 * loop, taking the process's mmap lock for writing over and over. With
 * --remap each of those touches is in a mapping of its own, made just
 * before it (32 pages of the file around the page): every touch is then
 * the first fault in its mapping. With --threads each touch is made by a
 * thread of its own, started for it: the first fault of a thread in a
 * mapping another thread made. With --unmap each touch is made by a thread
 * of its own in a mapping of its own (32 pages around the page), all made
 * before the first touch, and the main thread unmaps it right after the touch, before the
 * touching thread makes its next system call. Prints the touched pages, in
 * order, as a JSON list on stderr.
 *
 * The workload of tests/test_trace_used.py's tests of faults whose VMA
 * lookup finds the mmap lock busy (fault_around.bpf.h, fault_vma(); the
 * maple tree read of vma_lookup.bpf.h).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096L
#define STRIDE 32L

static atomic_int stop;

static void *map_and_unmap(void *unused)
{
	(void)unused;
	while (!atomic_load(&stop)) {
		void *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p != MAP_FAILED)
			munmap(p, 1 << 20);
	}
	return NULL;
}

/* Touch page @p: in @m, or with @fd in a mapping of its own around it. */
static int touch(volatile const char *m, int fd, long p)
{
	volatile const char *window;
	long first = p / STRIDE * STRIDE;

	if (fd < 0) {
		(void)m[p * PAGE];
		return 0;
	}
	window = mmap(NULL, STRIDE * PAGE, PROT_READ, MAP_SHARED, fd, first * PAGE);
	if (window == MAP_FAILED) {
		perror("mmap");
		return -1;
	}
	(void)window[(p - first) * PAGE];
	return 0;
}

struct touch_args {
	volatile const char *m;
	long p;
};

static void *touch_in_thread(void *arg)
{
	struct touch_args *t = arg;

	(void)t->m[t->p * PAGE];
	return NULL;
}

/* Touch page @p of @m from a new thread, and wait for it. */
static int touch_from_thread(volatile const char *m, long p)
{
	struct touch_args t = { m, p };
	pthread_t thread;

	if (pthread_create(&thread, NULL, touch_in_thread, &t)) {
		fprintf(stderr, "mmap-contend: cannot start a thread\n");
		return -1;
	}
	pthread_join(thread, NULL);
	return 0;
}

struct unmap_touch {
	volatile const char *window;
	long offset;
	atomic_int touched, unmapped;
};

/* Touch, then wait with no system call until the main thread has unmapped. */
static void *touch_then_wait(void *arg)
{
	struct unmap_touch *t = arg;

	(void)t->window[t->offset];
	atomic_store(&t->touched, 1);
	while (!atomic_load(&t->unmapped))
		;
	return NULL;
}

/* --unmap: page @p of its window @w (the STRIDE pages around it), as above. */
static int touch_and_unmap(volatile const char *w, long p)
{
	struct unmap_touch t = { .window = w, .offset = p % STRIDE * PAGE };
	pthread_t thread;

	if (pthread_create(&thread, NULL, touch_then_wait, &t)) {
		fprintf(stderr, "mmap-contend: cannot start a thread\n");
		return -1;
	}
	while (!atomic_load(&t.touched))
		;
	munmap((void *)w, STRIDE * PAGE);
	atomic_store(&t.unmapped, 1);
	pthread_join(thread, NULL);
	return 0;
}

/* --unmap: every window first (at most MAX_WINDOWS), then each touched and unmapped. */
#define MAX_WINDOWS 4096

static int touch_unmapped_windows(int fd, long pages)
{
	static volatile const char *windows[MAX_WINDOWS];
	long n = 0;

	for (long p = 3 + STRIDE; p < pages && n < MAX_WINDOWS; p += STRIDE) {
		windows[n] = mmap(NULL, STRIDE * PAGE, PROT_READ, MAP_SHARED, fd, p / STRIDE * STRIDE * PAGE);
		if (windows[n++] == MAP_FAILED) {
			perror("mmap");
			return -1;
		}
	}
	for (long i = 0, p = 3 + STRIDE; i < n; i++, p += STRIDE)
		if (touch_and_unmap(windows[i], p))
			return -1;
	return 0;
}

int main(int argc, char **argv)
{
	volatile const char *m;
	int remap = argc == 3 && !strcmp(argv[1], "--remap");
	int threads = argc == 3 && !strcmp(argv[1], "--threads");
	int unmap = argc == 3 && !strcmp(argv[1], "--unmap");
	const char *path = argv[argc - 1];
	struct stat st;
	pthread_t thread;
	long pages;
	int fd, failed = 0;

	if (argc != 2 && !remap && !threads && !unmap) {
		fprintf(stderr, "usage: mmap-contend [--remap | --threads | --unmap] FILE\n");
		return 2;
	}
	fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) < 0) {
		perror(path);
		return 1;
	}
	pages = st.st_size / PAGE;
	m = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	/* The first touch before the contention: the thread's VMA is known. */
	(void)m[3 * PAGE];
	if (pthread_create(&thread, NULL, map_and_unmap, NULL)) {
		fprintf(stderr, "mmap-contend: cannot start a thread\n");
		return 1;
	}
	if (unmap)
		failed = touch_unmapped_windows(fd, pages);
	else
		for (long p = 3 + STRIDE; p < pages && !failed; p += STRIDE)
			failed = threads ? touch_from_thread(m, p) : touch(m, remap ? fd : -1, p);
	atomic_store(&stop, 1);
	pthread_join(thread, NULL);
	if (failed)
		return 1;
	fprintf(stderr, "[3");
	for (long p = 3 + STRIDE; p < pages; p += STRIDE)
		fprintf(stderr, ", %ld", p);
	fprintf(stderr, "]\n");
	return 0;
}
