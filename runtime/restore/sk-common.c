/* SPDX-License-Identifier: MIT
 *
 * rrc-restore phase 1: socket addresses as recorded (struct rrc_sockaddr:
 * the bytes getsockname returned, the family first) and their printable
 * form for error messages.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include "sk.h"

socklen_t sk_addr(const struct rrc_sockaddr *ra, struct sockaddr_storage *ss)
{
	socklen_t len = ra->len;
	uint16_t fam;

	memset(ss, 0, sizeof(*ss));
	if (len > sizeof(ra->addr))
		len = sizeof(ra->addr);
	memcpy(&fam, ra->addr, sizeof(fam));
	if (len >= sizeof(fam) && fam == ra->family) {
		memcpy(ss, ra->addr, len);
	} else {
		/* addr[] without the family field */
		if (len + sizeof(fam) > sizeof(*ss))
			len = sizeof(*ss) - sizeof(fam);
		memcpy((char *)ss + sizeof(fam), ra->addr, len);
		len += sizeof(fam);
	}
	ss->ss_family = ra->family;
	return len;
}

const char *sk_addr_str(const struct rrc_sockaddr *ra)
{
	/* four in use at once: a message may name two address pairs */
	static char buf[4][160];
	static int which;
	char *b = buf[which = (which + 1) & 3], ip[INET6_ADDRSTRLEN];
	struct sockaddr_storage ss;
	socklen_t len = sk_addr(ra, &ss);

	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)&ss;
		inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
		snprintf(b, sizeof(buf[0]), "%s:%u", ip, ntohs(s->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)&ss;
		inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
		snprintf(b, sizeof(buf[0]), "[%s]:%u", ip, ntohs(s->sin6_port));
	} else if (ss.ss_family == AF_UNIX) {
		const struct sockaddr_un *s = (const void *)&ss;
		size_t n = len > offsetof(struct sockaddr_un, sun_path) ? len - offsetof(struct sockaddr_un, sun_path) : 0;
		if (!n)
			snprintf(b, sizeof(buf[0]), "(unnamed)");
		else if (s->sun_path[0] == 0)
			snprintf(b, sizeof(buf[0]), "@%.*s", (int)n - 1, s->sun_path + 1);
		else
			snprintf(b, sizeof(buf[0]), "%.*s", (int)strnlen(s->sun_path, n), s->sun_path);
	} else {
		snprintf(b, sizeof(buf[0]), "(family %u)", ss.ss_family);
	}
	return b;
}

const char *sk_proto_str(const struct rrc_fd *f)
{
	int type = f->u.sock.type & 0xf;

	if (f->u.sock.family == AF_UNIX)
		return type == SOCK_DGRAM ? "unix dgram" : type == SOCK_SEQPACKET ? "unix seqpacket" : "unix stream";
	if (type == SOCK_STREAM)
		return f->u.sock.family == AF_INET6 ? "TCPv6" : "TCP";
	if (type == SOCK_DGRAM)
		return f->u.sock.family == AF_INET6 ? "UDPv6" : "UDP";
	return "socket";
}

void sk_setopt(const struct rfd *r, int fd, int level, int opt, int val, const char *name)
{
	if (setsockopt(fd, level, opt, &val, sizeof(val)) < 0)
		rst_fail(RRC_RST_FD, errno, (uint32_t)r->f->fd, "fd %d: %s %s: setsockopt %s failed: %s",
			 r->f->fd, sk_proto_str(r->f), sk_addr_str(&r->f->u.sock.local), name,
			 rst_strerror(errno));
}
