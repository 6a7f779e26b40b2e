/* Refusal probe: an io_uring instance made by the raw io_uring_setup
 * syscall (glibc has no wrapper, liburing would use the same syscall):
 * `rrc dump` must refuse, naming io_uring (tests/test_refusals.py).
 * $ZDTM_DIR/uringresult holds "io_uring_setup=FD" or the -errno.
 */
#include "zdtm.h"
#include "../../include/rrc/sys.h"

#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	static uint8_t params[120]; /* struct io_uring_params, zeroed */
	long fd = rrc_syscall2(SYS_io_uring_setup, 4, (long)params);
	char res[64];
	snprintf(res, sizeof(res), "io_uring_setup=%ld\n", fd);
	zdtm_check(zdtm_write_file("uringresult", res) == 0, "write uringresult");
	printf("refuse_iouring: %s", res);
	if (fd < 0)
		zdtm_fail("io_uring_setup failed: %ld", fd);
	zdtm_ready();
	zdtm_wait_verify();
	zdtm_pass();
}
