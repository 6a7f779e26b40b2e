/* Refusal probe: a thread with capability sets of its own. capset (and
 * libcap's cap_set_proc) changes the calling thread's only; the image
 * gives every thread the main thread's (runtime/lib/creds.c), so a thread
 * that dropped a capability would come back with it. Here a worker drops
 * CAP_NET_RAW from its effective set (it stays permitted), which `rrc
 * dump` must refuse, naming the thread. Once "$ZDTM_DIR/clear" appears
 * the worker raises it again and the probe writes "cleared", so the test
 * can show that the same process then dumps and restores.
 */
#include <linux/capability.h>
#include <pthread.h>
#include "zdtm.h"

static void set_net_raw(int on)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	zdtm_check(syscall(SYS_capget, &h, d) == 0, "capget");
	if (on)
		d[0].effective |= 1u << CAP_NET_RAW;
	else
		d[0].effective &= ~(1u << CAP_NET_RAW);
	zdtm_check(syscall(SYS_capset, &h, d) == 0, "capset (this thread's)");
}

static void *worker(void *arg)
{
	(void)arg;
	set_net_raw(0);
	zdtm_ready();
	while (!zdtm_file_exists("clear"))
		zdtm_sleep_ms(5);
	set_net_raw(1);
	zdtm_write_file("cleared", "1\n");
	return NULL;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	pthread_t t;
	zdtm_check(pthread_create(&t, NULL, worker, NULL) == 0, "pthread_create");
	zdtm_check(pthread_join(t, NULL) == 0, "pthread_join");
	zdtm_wait_verify();
	zdtm_pass();
}
