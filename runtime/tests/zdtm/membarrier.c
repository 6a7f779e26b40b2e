/* zdtm: membarrier registrations come back (issue 16 §4). A process that
 * registered for private expedited barriers (liburcu, managed runtimes)
 * gets EPERM from the command without the registration: a restore that
 * lost it would break the program at its next barrier. Registered here:
 * MEMBARRIER_CMD_PRIVATE_EXPEDITED and, where the kernel has it, _RSEQ;
 * not _SYNC_CORE.
 * Verify: the registered commands succeed, the other fails with EPERM
 * (the restore registers what was registered, nothing more).
 */
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include "zdtm.h"

static long mb(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	long q = mb(MEMBARRIER_CMD_QUERY);
	zdtm_check(q >= 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED), "membarrier with private expedited commands");
	int rseq = (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) != 0, sync_core = (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) != 0;
	zdtm_check(mb(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0, "register private expedited");
	if (rseq)
		zdtm_check(mb(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ) == 0, "register private expedited rseq");
	zdtm_ready();
	zdtm_wait_verify();
	if (mb(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
		zdtm_fail("MEMBARRIER_CMD_PRIVATE_EXPEDITED: errno %d (the registration is gone)", errno);
	if (rseq && mb(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) != 0)
		zdtm_fail("MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: errno %d (the registration is gone)", errno);
	int sync_ok = sync_core && mb(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0;
	if (sync_ok)
		zdtm_fail("MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE succeeds, but was never registered for");
	if (zdtm_corrupt) /* a check that must fail: the registration never made */
		zdtm_fail("ZDTM_CORRUPT: MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE fails (never registered for)");
	zdtm_pass();
}
