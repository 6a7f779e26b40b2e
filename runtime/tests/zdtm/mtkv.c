/* mtkv: the project's own multithreaded test server (issue 2, point 5).
 *
 * Not a state probe like the other programs here but a small key-value
 * server built the way real servers are: one epoll thread waits for
 * readiness (EPOLLONESHOT per connection) and hands ready connections to a
 * worker pool through a queue guarded by a mutex and a condition variable;
 * workers parse requests and update a hash table with one mutex per
 * stripe. tests/test_servers.py loads it, dumps it while requests are in
 * flight, restores it and checks every key.
 *
 *   usage: mtkv PORT [WORKERS]        (listens on 127.0.0.1:PORT)
 *   protocol, one request per line, one reply line each:
 *     SET key value   -> OK            GET key  -> VALUE value | NIL
 *     DEL key         -> 1 | 0         COUNT    -> n
 *     DIGEST          -> 16 hex digits, order-independent over all pairs
 * Keys and values are printable, without spaces or newlines.
 */
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include "zdtm.h"

#define STRIPES 64
#define BUCKETS 65536
#define MAXW 64

struct item { struct item *next; char *key, *val; };
static struct item *table[BUCKETS];
static pthread_mutex_t stripe[STRIPES];

struct conn { int fd; size_t len; char buf[65536]; struct conn *next; };
static struct conn *q_head, *q_tail;
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static int ep;

static uint64_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static void reply(struct conn *c, const char *s, size_t n)
{
	size_t off = 0;
	while (off < n) {
		ssize_t k = write(c->fd, s + off, n - off);
		if (k < 0 && (errno == EINTR || errno == EAGAIN)) {
			if (errno == EAGAIN)
				zdtm_sleep_ms(1);
			continue;
		}
		if (k <= 0)
			return;
		off += (size_t)k;
	}
}

static void request(struct conn *c, char *line)
{
	/* strtok_r: workers parse concurrently (strtok's hidden state is shared) */
	char *save = NULL;
	char *cmd = strtok_r(line, " ", &save), *key = strtok_r(NULL, " ", &save),
	     *val = strtok_r(NULL, " ", &save);
	char out[128];
	if (!cmd) {
		reply(c, "ERR empty\n", 10);
		return;
	}
	if (!strcmp(cmd, "COUNT") || !strcmp(cmd, "DIGEST")) {
		uint64_t n = 0, d = 0;
		for (int s = 0; s < STRIPES; s++) {
			pthread_mutex_lock(&stripe[s]);
			for (int b = s; b < BUCKETS; b += STRIPES)
				for (struct item *it = table[b]; it; it = it->next) {
					n++;
					d += zdtm_mix(hash(it->key) ^ zdtm_mix(hash(it->val)));
				}
			pthread_mutex_unlock(&stripe[s]);
		}
		int len = !strcmp(cmd, "COUNT") ? snprintf(out, sizeof(out), "%lu\n", (unsigned long)n)
						: snprintf(out, sizeof(out), "%016lx\n", (unsigned long)d);
		reply(c, out, (size_t)len);
		return;
	}
	if (!key) {
		reply(c, "ERR no key\n", 11);
		return;
	}
	uint64_t h = hash(key);
	size_t b = h % BUCKETS;
	pthread_mutex_t *l = &stripe[b % STRIPES];
	pthread_mutex_lock(l);
	struct item **pp = &table[b], *it;
	while ((it = *pp) && strcmp(it->key, key))
		pp = &it->next;
	if (!strcmp(cmd, "SET") && val) {
		if (it) {
			free(it->val);
		} else {
			it = calloc(1, sizeof(*it));
			it->key = strdup(key);
			it->next = table[b];
			table[b] = it;
		}
		it->val = strdup(val);
		pthread_mutex_unlock(l);
		reply(c, "OK\n", 3);
	} else if (!strcmp(cmd, "GET")) {
		if (!it) {
			pthread_mutex_unlock(l);
			reply(c, "NIL\n", 4);
			return;
		}
		size_t n = strlen(it->val);
		char *o = malloc(n + 8);
		memcpy(o, "VALUE ", 6);
		memcpy(o + 6, it->val, n);
		o[n + 6] = '\n';
		pthread_mutex_unlock(l);
		reply(c, o, n + 7);
		free(o);
	} else if (!strcmp(cmd, "DEL")) {
		if (it) {
			*pp = it->next;
			free(it->key);
			free(it->val);
			free(it);
		}
		pthread_mutex_unlock(l);
		reply(c, it ? "1\n" : "0\n", 2);
	} else {
		pthread_mutex_unlock(l);
		reply(c, "ERR command\n", 12);
	}
}

static void serve(struct conn *c)
{
	for (;;) {
		ssize_t k = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			break;
		if (k <= 0) { /* EOF or error (e.g. a connection reset by a restore) */
			close(c->fd);
			free(c);
			return;
		}
		c->len += (size_t)k;
		char *start = c->buf, *nl;
		while ((nl = memchr(start, '\n', c->len - (size_t)(start - c->buf)))) {
			*nl = 0;
			request(c, start);
			start = nl + 1;
		}
		c->len -= (size_t)(start - c->buf);
		memmove(c->buf, start, c->len);
		if (c->len == sizeof(c->buf) - 1) {
			reply(c, "ERR line too long\n", 18);
			c->len = 0;
		}
	}
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = c };
	if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
		close(c->fd);
		free(c);
	}
}

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&q_lock);
		while (!q_head)
			pthread_cond_wait(&q_cond, &q_lock);
		struct conn *c = q_head;
		q_head = c->next;
		if (!q_head)
			q_tail = NULL;
		pthread_mutex_unlock(&q_lock);
		serve(c);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: mtkv PORT [WORKERS]\n");
		return 2;
	}
	int nw = argc > 2 ? atoi(argv[2]) : 4;
	if (nw < 1 || nw > MAXW)
		nw = 4;
	for (int s = 0; s < STRIPES; s++)
		pthread_mutex_init(&stripe[s], NULL);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 128) != 0) {
		perror("mtkv: listen");
		return 1;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);
	pthread_t th;
	for (int i = 0; i < nw; i++)
		pthread_create(&th, NULL, worker, NULL);
	printf("mtkv: listening on 127.0.0.1:%s with %d workers\n", argv[1], nw);
	fflush(stdout);
	for (;;) {
		struct epoll_event evs[64];
		int n = epoll_wait(ep, evs, 64, -1);
		if (n < 0 && errno == EINTR)
			continue;
		for (int i = 0; i < n; i++) {
			if (!evs[i].data.ptr) {
				int fd;
				while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					struct conn *c = calloc(1, sizeof(*c));
					c->fd = fd;
					struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = c };
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				}
				continue;
			}
			struct conn *c = evs[i].data.ptr;
			c->next = NULL;
			pthread_mutex_lock(&q_lock);
			if (q_tail)
				q_tail->next = c;
			else
				q_head = c;
			q_tail = c;
			pthread_cond_signal(&q_cond);
			pthread_mutex_unlock(&q_lock);
		}
	}
}
