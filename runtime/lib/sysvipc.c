/* SPDX-License-Identifier: MIT
 *
 * SysV IPC objects (issue 16 §4: what the process owns in its
 * namespaces). rrc starts every process in an IPC namespace of its own
 * (rrc-container), so every semaphore set, message queue and shared
 * memory segment there is the process's. An image does not carry them
 * yet and a restore gets an empty namespace: the process's next semop or
 * msgrcv on its id would fail with EINVAL. Refused at dump, naming the
 * object, from /proc/sysvipc (the reader's IPC namespace).
 */
#include "rrc_lib.h"
#include "sysvipc.h"

static int check_kind(const char *file, const char *what)
{
	char *buf = rrc_s->textbuf;
	long n = rrc_read_file(file, buf, (1 << 16) - 1);
	if (n <= 0)
		return 0; /* no SysV IPC in this kernel */
	buf[n] = 0;
	const char *p = buf;
	while (*p && *p != '\n') /* the header */
		p++;
	if (*p)
		p++;
	while (*p == ' ')
		p++;
	if (!*p)
		return 0;
	/* the first object: "key id ..." */
	const char *key = p;
	while (*p && *p != ' ')
		p++;
	while (*p == ' ')
		p++;
	uint64_t id = rrc_parse_u64(p, 10, 0);
	rrc_set_err(RRC_ERR_PROCESS_STATE, 0, "the process has a SysV ", -1, 0);
	size_t l = rrc_strlen(rrc_s->err_msg);
	l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, what);
	l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, " (id ");
	l = rrc_bput_u64(rrc_s->err_msg, sizeof rrc_s->err_msg, l, id);
	l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, ", key ");
	size_t kl = 0;
	while (key[kl] && key[kl] != ' ' && kl < 20)
		kl++;
	char k[24];
	rrc_memcpy(k, key, kl);
	k[kl] = 0;
	l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, k);
	rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l,
		 ") in its IPC namespace: an image does not carry SysV IPC objects yet, and a restore's "
		 "namespace would not have it (ipcs lists them)");
	return -1;
}

int rrc_sysvipc_check(void)
{
	if (check_kind("/proc/sysvipc/sem", "semaphore set") < 0 || check_kind("/proc/sysvipc/msg", "message queue") < 0 ||
	    check_kind("/proc/sysvipc/shm", "shared memory segment") < 0)
		return -1;
	return 0;
}
