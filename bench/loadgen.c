/*
 * loadgen: the steady Redis SET load of bench/checkpoint_pause.py.
 *
 * Why not redis-benchmark: the benchmark needs the load generator's own count
 * of writes acknowledged in each 100 ms checkpoint interval, and latencies it
 * can cut to the exact window in which checkpoints were taken. redis-benchmark
 * only reports whole-run totals (and ~250 ms progress lines). This program
 * records, for every acknowledged SET, its completion time (CLOCK_MONOTONIC,
 * the clock Python's time.monotonic_ns() reads) and its latency, and writes
 * them to a binary file at the end; all statistics are computed from that.
 *
 * Load model: a fixed number of connections (--clients), each closed-loop
 * with --pipeline requests outstanding (default 1). Keys are "key:%012llu"
 * (the layout redis-benchmark's __rand_int__ uses), drawn uniformly from
 * [0, --keyspace) by a seeded xorshift, so they overwrite the keys the fill
 * created and the data set does not grow. Optional --rate caps the total
 * request rate (ops/s); in that mode latency is measured from the scheduled
 * send time, so a stall is charged to every request it delayed.
 *
 * Stops after --duration-ms or on SIGTERM/SIGINT, then writes --out:
 *   header  "RRCLG001", u64 t_start_ns, u64 t_end_ns, u64 count, u64 errors,
 *           u64 value_size, u64 key_len
 *   records count x { u64 done_ns; u64 latency_ns; }
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define KEY_LEN 16 /* "key:" + 12 digits */
#define MAX_CLIENTS 256
#define MAX_PIPELINE 64
#define MAX_RECORDS (64ull * 1024 * 1024) /* bound on memory: 1 GiB of records */

struct rec {
	uint64_t done_ns;
	uint64_t lat_ns;
};

struct conn {
	int fd;
	char *out;          /* pending request bytes */
	size_t out_len, out_off;
	char in[4096];      /* reply bytes not yet parsed */
	size_t in_len;
	uint64_t sent_ns[MAX_PIPELINE]; /* FIFO of send (or scheduled) times */
	unsigned head, tail, outstanding;
};

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state;
static uint64_t xorshift64(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static void die(const char *what)
{
	fprintf(stderr, "loadgen: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: loadgen --port P --keyspace N --value-size V --duration-ms D --out FILE\n"
		"               [--host 127.0.0.1] [--clients 4] [--pipeline 1] [--rate OPS] [--seed S]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *host = "127.0.0.1", *out_path = NULL;
	long port = 0, clients = 4, pipeline = 1, value_size = 0;
	unsigned long long keyspace = 0, duration_ms = 0, seed = 1, rate = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			usage();
		if (!strcmp(a, "--host")) host = v;
		else if (!strcmp(a, "--port")) port = strtol(v, NULL, 10);
		else if (!strcmp(a, "--clients")) clients = strtol(v, NULL, 10);
		else if (!strcmp(a, "--pipeline")) pipeline = strtol(v, NULL, 10);
		else if (!strcmp(a, "--value-size")) value_size = strtol(v, NULL, 10);
		else if (!strcmp(a, "--keyspace")) keyspace = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--duration-ms")) duration_ms = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--rate")) rate = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--out")) out_path = v;
		else usage();
		i++;
	}
	if (!out_path || port <= 0 || port > 65535 || keyspace == 0 || keyspace >= 1000000000000ull || value_size <= 0 ||
	    value_size > (1 << 20) || duration_ms == 0 || duration_ms > 3600 * 1000ull ||
	    clients <= 0 || clients > MAX_CLIENTS || pipeline <= 0 || pipeline > MAX_PIPELINE) {
		fprintf(stderr, "loadgen: bad or missing argument (port, keyspace < 10^12, value-size <= 1 MiB, "
				"duration-ms <= 1 h, clients <= %d, pipeline <= %d, out are required)\n",
			MAX_CLIENTS, MAX_PIPELINE);
		usage();
	}
	rng_state = seed ? seed * 0x9E3779B97F4A7C15ull : 0x9E3779B97F4A7C15ull;

	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* The request template: *3 $3 SET $16 key:NNNNNNNNNNNN $V <value>.
	 * The key digits are rewritten per request; the value is deterministic. */
	char hdr[128];
	int hdr_len = snprintf(hdr, sizeof(hdr), "*3\r\n$3\r\nSET\r\n$%d\r\n", KEY_LEN);
	char vhdr[32];
	int vhdr_len = snprintf(vhdr, sizeof(vhdr), "\r\n$%ld\r\n", value_size);
	size_t req_len = (size_t)hdr_len + KEY_LEN + (size_t)vhdr_len + (size_t)value_size + 2;
	size_t key_off = (size_t)hdr_len;

	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
		fprintf(stderr, "loadgen: bad IPv4 address %s\n", host);
		return 2;
	}

	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	struct conn *cs = calloc((size_t)clients, sizeof(*cs));
	if (!cs)
		die("calloc");
	for (long c = 0; c < clients; c++) {
		struct conn *k = &cs[c];
		k->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (k->fd < 0)
			die("socket");
		if (connect(k->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
			die("connect");
		int one = 1;
		setsockopt(k->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		fcntl(k->fd, F_SETFL, fcntl(k->fd, F_GETFL) | O_NONBLOCK);
		k->out = malloc(req_len * (size_t)pipeline);
		if (!k->out)
			die("malloc");
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = (uint64_t)c};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, k->fd, &ev) < 0)
			die("epoll_ctl");
	}

	size_t cap = 1 << 20, count = 0;
	struct rec *recs = malloc(cap * sizeof(*recs));
	if (!recs)
		die("malloc");
	uint64_t errors = 0, sent = 0;
	const uint64_t t_start = now_ns();
	const uint64_t t_stop = t_start + duration_ms * 1000000ull;
	int fatal = 0;

	/* Queue one request on connection k; returns 0 if the rate cap says wait. */
	#define SCHED_NS(n) (t_start + (uint64_t)((double)(n) * 1e9 / (double)rate))
	for (;;) {
		uint64_t t = now_ns();
		if (stop_flag || t >= t_stop || fatal)
			break;
		/* Fill every connection up to its pipeline depth. */
		for (long c = 0; c < clients; c++) {
			struct conn *k = &cs[c];
			while (k->outstanding < (unsigned)pipeline) {
				uint64_t stamp = t;
				if (rate) {
					uint64_t due = SCHED_NS(sent);
					if (due > t)
						break;
					stamp = due;
				}
				/* Move the unsent bytes (all of outstanding requests,
				 * so < pipeline requests) to the front before appending:
				 * the buffer holds pipeline requests. */
				if (k->out_off) {
					memmove(k->out, k->out + k->out_off, k->out_len - k->out_off);
					k->out_len -= k->out_off;
					k->out_off = 0;
				}
				char *r = k->out + k->out_len;
				memcpy(r, hdr, (size_t)hdr_len);
				char kb[32]; /* keyspace < 10^12: exactly KEY_LEN bytes */
				snprintf(kb, sizeof(kb), "key:%012llu",
					 (unsigned long long)(xorshift64() % keyspace));
				memcpy(r + key_off, kb, KEY_LEN);
				memcpy(r + key_off + KEY_LEN, vhdr, (size_t)vhdr_len);
				char *val = r + key_off + KEY_LEN + vhdr_len;
				/* Deterministic value: the request number, repeated. */
				char pat[24];
				int pl = snprintf(pat, sizeof(pat), "%020llu", (unsigned long long)sent);
				for (long off = 0; off < value_size; off += pl)
					memcpy(val + off, pat, (size_t)(value_size - off < pl ? value_size - off : pl));
				memcpy(val + value_size, "\r\n", 2);
				k->out_len += req_len;
				k->sent_ns[k->tail] = stamp;
				k->tail = (k->tail + 1) % MAX_PIPELINE;
				k->outstanding++;
				sent++;
			}
			while (k->out_off < k->out_len) {
				ssize_t n = send(k->fd, k->out + k->out_off, k->out_len - k->out_off, MSG_NOSIGNAL);
				if (n > 0) {
					k->out_off += (size_t)n;
					continue;
				}
				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
					break;
				fprintf(stderr, "loadgen: send: %s\n", n < 0 ? strerror(errno) : "closed");
				fatal = 1;
				break;
			}
		}
		int timeout_ms = 10; /* bounded wait: re-checks stop/duration */
		if (rate) {
			uint64_t due = SCHED_NS(sent), now = now_ns();
			timeout_ms = due > now ? (int)((due - now) / 1000000ull) : 0;
			if (timeout_ms > 10)
				timeout_ms = 10;
		}
		struct epoll_event evs[MAX_CLIENTS];
		int n = epoll_wait(ep, evs, MAX_CLIENTS, timeout_ms);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		/* Edge-triggered: read every connection that has outstanding
		 * requests until EAGAIN, whichever event woke us. */
		for (long c = 0; c < clients; c++) {
			struct conn *k = &cs[c];
			while (k->outstanding) {
				ssize_t r = recv(k->fd, k->in + k->in_len, sizeof(k->in) - k->in_len, 0);
				if (r < 0 && errno == EINTR)
					continue;
				if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
					break;
				if (r <= 0) {
					fprintf(stderr, "loadgen: recv: %s\n", r < 0 ? strerror(errno) : "server closed the connection");
					fatal = 1;
					break;
				}
				k->in_len += (size_t)r;
				uint64_t tdone = now_ns();
				/* Replies to SET are single lines: +OK or -ERR ... */
				size_t pos = 0;
				for (;;) {
					char *nl = memchr(k->in + pos, '\n', k->in_len - pos);
					if (!nl)
						break;
					if (k->in[pos] == '-') {
						if (errors < 5)
							fprintf(stderr, "loadgen: server error: %.*s\n",
								(int)(nl - (k->in + pos)), k->in + pos);
						errors++;
					} else if (k->in[pos] != '+') {
						fprintf(stderr, "loadgen: unexpected reply byte 0x%02x\n",
							(unsigned char)k->in[pos]);
						fatal = 1;
					}
					if (!k->outstanding) {
						fprintf(stderr, "loadgen: reply without request\n");
						fatal = 1;
						break;
					}
					uint64_t s = k->sent_ns[k->head];
					k->head = (k->head + 1) % MAX_PIPELINE;
					k->outstanding--;
					if (count == cap) {
						if (cap >= MAX_RECORDS) {
							fprintf(stderr, "loadgen: record limit reached, stopping\n");
							stop_flag = 1;
						} else {
							cap *= 2;
							struct rec *nr = realloc(recs, cap * sizeof(*recs));
							if (!nr)
								die("realloc");
							recs = nr;
						}
					}
					if (count < cap) {
						recs[count].done_ns = tdone;
						recs[count].lat_ns = tdone - s;
						count++;
					}
					pos = (size_t)(nl - k->in) + 1;
				}
				memmove(k->in, k->in + pos, k->in_len - pos);
				k->in_len -= pos;
				if (k->in_len == sizeof(k->in)) {
					fprintf(stderr, "loadgen: reply line too long\n");
					fatal = 1;
					break;
				}
			}
		}
	}
	const uint64_t t_end = now_ns();

	FILE *f = fopen(out_path, "wb");
	if (!f)
		die(out_path);
	uint64_t h[6] = {t_start, t_end, (uint64_t)count, errors, (uint64_t)value_size, KEY_LEN};
	if (fwrite("RRCLG001", 1, 8, f) != 8 || fwrite(h, sizeof(h), 1, f) != 1 ||
	    (count && fwrite(recs, sizeof(*recs), count, f) != count) || fclose(f) != 0)
		die("write results");
	double secs = (double)(t_end - t_start) / 1e9;
	fprintf(stderr, "loadgen: %zu SETs acknowledged in %.3f s (%.0f/s), %llu errors%s\n",
		count, secs, secs > 0 ? (double)count / secs : 0.0, (unsigned long long)errors,
		fatal ? ", stopped on a fatal error" : "");
	return fatal ? 1 : 0;
}
