/* zdtm: a program with what `rrc exec --record` cannot record, for its
 * warnings (tests/test_record.py): a section named like a Go binary's
 * build information, a signal handler, a time stamp read with rdtsc and a
 * raw syscall instruction, all in its own code. It only waits for verify.
 */
#include <signal.h>
#include <x86intrin.h>
#include "zdtm.h"

/* what the Go toolchain puts in every binary it links */
__attribute__((section(".go.buildinfo"), used)) static const char go_buildinfo[32] = "\xff Go buildinf:";

static void on_usr1(int sig) { (void)sig; }

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	signal(SIGUSR1, on_usr1);
	unsigned long long t = __rdtsc();
	long pid;
	__asm__ volatile("mov $39, %%eax\n\tsyscall" : "=a"(pid) : : "rcx", "r11", "memory"); /* getpid */
	if (pid <= 0 || t == 0)
		zdtm_fail("rdtsc or the raw getpid failed");
	zdtm_ready();
	zdtm_wait_verify();
	zdtm_pass();
}
