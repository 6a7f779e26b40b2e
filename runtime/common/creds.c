/* SPDX-License-Identifier: MIT
 *
 * rrc_creds_apply (rrc/creds.h): the calling thread takes an image's
 * credentials. The order is CRIU's (criu/pie/restorer.c, restore_creds):
 * supplementary groups first; then SECBIT_NO_SETUID_FIXUP, so that the
 * id changes keep the capabilities the remaining steps need (a change of
 * uid from 0 would otherwise clear them); the gids, then the uids, each
 * with its file-system id; the image's securebits; the bounding set
 * trimmed (needs CAP_SETPCAP, still effective); then the three sets by
 * capset, which drops what the image did not have; last the ambient set,
 * which needs its capabilities permitted and inheritable.
 * ASYNC-SIGNAL-SAFE, no libc: also linked into the restorer blob.
 */
#include "rrc/creds.h"
#include "rrc/sys.h"

#define PR_CAPBSET_DROP_       24
#define PR_GET_SECUREBITS_     27
#define PR_SET_SECUREBITS_     28
#define PR_CAP_AMBIENT_        47
#define PR_CAP_AMBIENT_RAISE_   2
#define PR_CAP_AMBIENT_CLEAR_ALL_ 4
#define SECBIT_NO_SETUID_FIXUP_ (1u << 2)
#define CAP_VERSION_3_         0x20080522u

struct cap_header { uint32_t version; int32_t pid; };
struct cap_data { uint32_t effective, permitted, inheritable; };

long rrc_creds_apply(const struct rrc_creds *c, const char **what)
{
	long r;

	if (c->nr_groups > RRC_CREDS_GROUPS_MAX) {
		*what = "the image's group count";
		return -22;
	}
	*what = "setgroups";
	if ((r = rrc_sys_setgroups((int)c->nr_groups, c->groups)) < 0)
		return r;
	*what = "PR_SET_SECUREBITS (SECBIT_NO_SETUID_FIXUP, to keep the capabilities through the id changes)";
	if ((r = rrc_sys_prctl(PR_SET_SECUREBITS_, SECBIT_NO_SETUID_FIXUP_, 0, 0, 0)) < 0)
		return r;
	*what = "setresgid";
	if ((r = rrc_sys_setresgid(c->gid, c->egid, c->sgid)) < 0)
		return r;
	/* setfs[ug]id return the previous id, not an error: asked again, the
	 * kernel tells which one it has */
	*what = "setfsgid";
	rrc_sys_setfsgid(c->fsgid);
	if ((uint32_t)rrc_sys_setfsgid(~0u) != c->fsgid)
		return -1;
	*what = "setresuid";
	if ((r = rrc_sys_setresuid(c->uid, c->euid, c->suid)) < 0)
		return r;
	*what = "setfsuid";
	rrc_sys_setfsuid(c->fsuid);
	if ((uint32_t)rrc_sys_setfsuid(~0u) != c->fsuid)
		return -1;
	*what = "PR_SET_SECUREBITS";
	if ((uint32_t)rrc_sys_prctl(PR_GET_SECUREBITS_, 0, 0, 0, 0) != c->secbits &&
	    (r = rrc_sys_prctl(PR_SET_SECUREBITS_, c->secbits, 0, 0, 0)) < 0)
		return r;
	*what = "PR_CAPBSET_DROP";
	for (unsigned cap = 0; cap < 64; cap++) {
		if (c->cap_bnd & (1ull << cap))
			continue;
		r = rrc_sys_prctl(PR_CAPBSET_DROP_, cap, 0, 0, 0);
		if (r == -22) /* EINVAL: past the kernel's last capability */
			break;
		if (r < 0)
			return r;
	}
	*what = "capset";
	struct cap_header h = { CAP_VERSION_3_, 0 };
	struct cap_data d[2] = {
		{ (uint32_t)c->cap_eff, (uint32_t)c->cap_prm, (uint32_t)c->cap_inh },
		{ (uint32_t)(c->cap_eff >> 32), (uint32_t)(c->cap_prm >> 32), (uint32_t)(c->cap_inh >> 32) },
	};
	if ((r = rrc_sys_capset(&h, d)) < 0)
		return r;
	*what = "PR_CAP_AMBIENT";
	if ((r = rrc_sys_prctl(PR_CAP_AMBIENT_, PR_CAP_AMBIENT_CLEAR_ALL_, 0, 0, 0)) < 0)
		return r;
	for (unsigned cap = 0; cap < 64; cap++)
		if ((c->cap_amb & (1ull << cap)) &&
		    (r = rrc_sys_prctl(PR_CAP_AMBIENT_, PR_CAP_AMBIENT_RAISE_, cap, 0, 0)) < 0)
			return r;
	return 0;
}

long rrc_creds_caps_self(uint64_t *permitted, uint64_t *effective)
{
	struct cap_header h = { CAP_VERSION_3_, 0 };
	struct cap_data d[2];
	long r = rrc_sys_capget(&h, d);
	if (r < 0)
		return r;
	*permitted = d[0].permitted | (uint64_t)d[1].permitted << 32;
	*effective = d[0].effective | (uint64_t)d[1].effective << 32;
	return 0;
}

long rrc_creds_thread_caps(struct rrc_thread_caps *t)
{
	struct cap_header h = { CAP_VERSION_3_, 0 };
	struct cap_data d[2];
	long r = rrc_sys_capget(&h, d);
	if (r < 0)
		return r;
	t->cap_inh = d[0].inheritable | (uint64_t)d[1].inheritable << 32;
	t->cap_prm = d[0].permitted | (uint64_t)d[1].permitted << 32;
	t->cap_eff = d[0].effective | (uint64_t)d[1].effective << 32;
	t->cap_amb = 0;
	uint64_t can = t->cap_prm & t->cap_inh;
	for (int c = 0; c < 64; c++)
		if ((can >> c) & 1) {
			r = rrc_sys_prctl(47 /* PR_CAP_AMBIENT */, 1 /* PR_CAP_AMBIENT_IS_SET */, (unsigned long)c, 0, 0);
			if (r < 0)
				return r;
			if (r == 1)
				t->cap_amb |= 1ull << c;
		}
	return 0;
}
