/* zdtm: an IPv6 TCP connection that comes and goes, for the TCP table of
 * a copy snapshot (tests/test_tcp_table.py).
 *
 * The pause takes the TCP table with AF_INET6 only if the fd check just
 * before it saw an IPv6 TCP socket (a dump of a family walks the whole
 * connection hash: runtime/lib/sk-diag.c). This program has no IPv6
 * socket but the one it connects to [::1]:$ZDTM_PORT (a listener outside
 * it), holds for ~2 ms and closes, ~2 ms apart: some pauses find a
 * connection the check before them had not seen, and their table must
 * still hold it (control.c takes it again with AF_INET6).
 *
 * Verify: PASS once told (the state is in the images, not in the
 * program).
 */
#include <netinet/in.h>
#include <sys/socket.h>
#include "zdtm.h"

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	const char *ps = getenv("ZDTM_PORT");
	zdtm_check(ps != NULL, "ZDTM_PORT");
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)atoi(ps)),
				  .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	zdtm_ready();
	long rounds = 0;
	while (!zdtm_should_verify()) {
		int s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0)
			zdtm_fail("connect to [::1]:%s: %s", ps, strerror(errno));
		zdtm_sleep_ms(2);
		close(s);
		zdtm_sleep_ms(2);
		rounds++;
	}
	zdtm_check(rounds > 0, "no connection made");
	zdtm_pass();
	return 0;
}
