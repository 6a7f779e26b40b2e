/* Refusal probe: threads with different credentials. The image gives
 * every thread one set (the main thread's, runtime/lib/creds.c): glibc's
 * setuid changes every thread's, but a raw setresuid system call only the
 * caller's. Here the main thread changes its saved uid alone (to 1234;
 * its real and effective stay root's, so it still reads the zdtm files),
 * which `rrc dump` must refuse, naming it, rather than restore every
 * thread with the main thread's ids. Once "$ZDTM_DIR/clear" appears the
 * probe puts the saved uid back (raw again) and writes "cleared", so the
 * test can show that the same process then dumps and restores.
 */
#include "zdtm.h"

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	zdtm_check(syscall(SYS_setresuid, -1, -1, 1234) == 0, "raw setresuid in the main thread");
	zdtm_ready();
	while (!zdtm_file_exists("clear"))
		zdtm_sleep_ms(5);
	zdtm_check(syscall(SYS_setresuid, -1, -1, 0) == 0, "raw setresuid back");
	zdtm_write_file("cleared", "1\n");
	zdtm_wait_verify();
	uid_t r, e, s;
	zdtm_check(getresuid(&r, &e, &s) == 0, "getresuid");
	if (r || e || s)
		zdtm_fail("uids %u/%u/%u, not 0/0/0", r, e, s);
	zdtm_pass();
}
