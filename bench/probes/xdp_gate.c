/* Path-cost probe (bench/path_costs.py --configs ...,routed_xdp_out): an AF_XDP pass-through of the server's packets on the
 * backup host. XDP on IN_IF (the link from the primary) sends packets
 * from 10.77.0.1 to an AF_XDP socket; this program copies each into a
 * second UMEM, rewrites the Ethernet addresses for OUT_IF (to the client)
 * and transmits it there, in batches: what a user-space gate holding
 * outputs in AF_XDP frames would cost before deciding anything.
 *   xdp_gate IN_IF OUT_IF DST_MAC BPF_OBJ
 */
#include <errno.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <xdp/xsk.h>

#define NFRAMES 4096
#define FSIZE XSK_UMEM__DEFAULT_FRAME_SIZE
#define BATCH 64

struct side {
	void *area;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xsk_ring_prod fill, tx;
	struct xsk_ring_cons comp, rx;
};

static void die(const char *w, int e) { fprintf(stderr, "xdp_gate: %s: %s\n", w, strerror(e < 0 ? -e : e)); exit(1); }

static void make(struct side *s, const char *ifname, int rx)
{
	s->area = mmap(NULL, (size_t)NFRAMES * FSIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->area == MAP_FAILED) die("mmap", errno);
	int r = xsk_umem__create(&s->umem, s->area, (__u64)NFRAMES * FSIZE, &s->fill, &s->comp, NULL);
	if (r) die("xsk_umem__create", r);
	struct xsk_socket_config cfg = { .rx_size = XSK_RING_CONS__DEFAULT_NUM_DESCS, .tx_size = XSK_RING_PROD__DEFAULT_NUM_DESCS,
					 .libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD, .bind_flags = XDP_COPY };
	r = xsk_socket__create(&s->xsk, ifname, 0, s->umem, rx ? &s->rx : NULL, rx ? NULL : &s->tx, &cfg);
	if (r) die("xsk_socket__create", r);
	if (rx) { /* every frame to the fill ring */
		__u32 idx;
		if (xsk_ring_prod__reserve(&s->fill, XSK_RING_PROD__DEFAULT_NUM_DESCS, &idx) != XSK_RING_PROD__DEFAULT_NUM_DESCS) die("fill", EIO);
		for (__u32 i = 0; i < XSK_RING_PROD__DEFAULT_NUM_DESCS; i++)
			*xsk_ring_prod__fill_addr(&s->fill, idx + i) = (__u64)i * FSIZE;
		xsk_ring_prod__submit(&s->fill, XSK_RING_PROD__DEFAULT_NUM_DESCS);
	}
}

int main(int argc, char **argv)
{
	if (argc != 5) { fprintf(stderr, "usage: xdp_gate IN_IF OUT_IF DST_MAC BPF_OBJ\n"); return 2; }
	unsigned char dst[6], src[6];
	if (sscanf(argv[3], "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &dst[0], &dst[1], &dst[2], &dst[3], &dst[4], &dst[5]) != 6) die("DST_MAC", EINVAL);
	struct ifreq ifr = { 0 };
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", argv[2]);
	int sk = socket(AF_INET, SOCK_DGRAM, 0);
	if (sk < 0 || ioctl(sk, SIOCGIFHWADDR, &ifr) < 0) die("OUT_IF address", errno);
	memcpy(src, ifr.ifr_hwaddr.sa_data, 6);
	close(sk);
	struct bpf_object *obj = bpf_object__open_file(argv[4], NULL);
	if (!obj || bpf_object__load(obj)) die("loading the BPF object", errno);
	struct bpf_program *prog = bpf_object__find_program_by_name(obj, "redirect_server");
	int in_ifindex = (int)if_nametoindex(argv[1]);
	int r = bpf_xdp_attach(in_ifindex, bpf_program__fd(prog), XDP_FLAGS_DRV_MODE, NULL);
	if (r) die("bpf_xdp_attach (driver mode)", r);
	struct side in = { 0 }, out = { 0 };
	make(&in, argv[1], 1);
	make(&out, argv[2], 0);
	int map = bpf_object__find_map_fd_by_name(obj, "xsks");
	r = xsk_socket__update_xskmap(in.xsk, map);
	if (r) die("xsk_socket__update_xskmap", r);
	fprintf(stderr, "xdp_gate: forwarding from %s to %s\n", argv[1], argv[2]);
	__u32 next_out = 0; /* out frames used round-robin; completions just reaped */
	struct pollfd pfd = { .fd = xsk_socket__fd(in.xsk), .events = POLLIN };
	for (;;) {
		__u32 idx_rx, idx_tx, idx_fill, idx_c;
		__u32 n = xsk_ring_cons__peek(&in.rx, BATCH, &idx_rx);
		if (!n) {
			poll(&pfd, 1, 1000);
			continue;
		}
		__u32 done = xsk_ring_cons__peek(&out.comp, NFRAMES, &idx_c);
		if (done)
			xsk_ring_cons__release(&out.comp, done);
		while (xsk_ring_prod__reserve(&out.tx, n, &idx_tx) != n)
			sendto(xsk_socket__fd(out.xsk), NULL, 0, MSG_DONTWAIT, NULL, 0);
		while (xsk_ring_prod__reserve(&in.fill, n, &idx_fill) != n)
			;
		for (__u32 i = 0; i < n; i++) {
			const struct xdp_desc *d = xsk_ring_cons__rx_desc(&in.rx, idx_rx + i);
			unsigned char *p = xsk_umem__get_data(in.area, d->addr);
			__u64 o = (__u64)(next_out++ % NFRAMES) * FSIZE;
			unsigned char *q = xsk_umem__get_data(out.area, o);
			memcpy(q, p, d->len);
			memcpy(q, dst, 6);
			memcpy(q + 6, src, 6);
			struct xdp_desc *t = xsk_ring_prod__tx_desc(&out.tx, idx_tx + i);
			t->addr = o;
			t->len = d->len;
			*xsk_ring_prod__fill_addr(&in.fill, idx_fill + i) = xsk_umem__extract_addr(d->addr);
		}
		xsk_ring_cons__release(&in.rx, n);
		xsk_ring_prod__submit(&in.fill, n);
		xsk_ring_prod__submit(&out.tx, n);
		sendto(xsk_socket__fd(out.xsk), NULL, 0, MSG_DONTWAIT, NULL, 0);
	}
}
