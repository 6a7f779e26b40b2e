/* zdtm: the host and domain names the process set in its UTS namespace
 * come back (issue 16 §4: what the process owns in its namespaces). rrc
 * runs every service in a UTS namespace of its own, so a restore on
 * another host must not show that host's name: the process's names are
 * the image's (PROCATTR nodename, domainname).
 * Verify: uname gives the names set before the dumps.
 */
#include <sched.h>
#include <sys/utsname.h>
#include "zdtm.h"

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	/* Under rrc the container's UTS namespace is the process's own. Run
	 * alone (test_selfcheck) the program would rename the machine: it
	 * makes itself one first (not under rrc: unshare moves the calling
	 * thread only, and the library's threads would stay behind) */
	const char *pre = getenv("LD_PRELOAD");
	if (!pre || !strstr(pre, "librrc"))
		zdtm_check(unshare(CLONE_NEWUTS) == 0, "unshare(CLONE_NEWUTS)");
	char host[64], domain[64];
	snprintf(host, sizeof host, "rrc-zdtm-%d", getpid());
	snprintf(domain, sizeof domain, "uts.example");
	zdtm_check(sethostname(host, strlen(host)) == 0, "sethostname (root in the container's UTS namespace)");
	zdtm_check(setdomainname(domain, strlen(domain)) == 0, "setdomainname");
	zdtm_ready();
	zdtm_wait_verify();
	if (zdtm_corrupt)
		zdtm_check(sethostname("corrupt", 7) == 0, "corrupt");
	struct utsname u;
	zdtm_check(uname(&u) == 0, "uname");
	if (strcmp(u.nodename, host))
		zdtm_fail("the host name is '%s', expected '%s'", u.nodename, host);
	if (strcmp(u.domainname, domain))
		zdtm_fail("the domain name is '%s', expected '%s'", u.domainname, domain);
	zdtm_pass();
}
