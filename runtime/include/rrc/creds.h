/* SPDX-License-Identifier: MIT
 *
 * Giving the calling thread the credentials an image recorded (struct
 * rrc_creds, image.h): the restorer blob does it for each application
 * thread once nothing it still has to do needs root (restore/pie), the
 * library's control thread for itself at the end of a restore
 * (lib/restored.c). Credentials belong to a thread in Linux, so each
 * thread calls this for itself. The caller holds CAP_SETUID, CAP_SETGID
 * and CAP_SETPCAP (the restorer runs as root).
 * ASYNC-SIGNAL-SAFE and freestanding (common/creds.c, raw system calls).
 */
#ifndef RRC_CREDS_H
#define RRC_CREDS_H

#include "rrc/image.h"

/* 0, or -errno with *what naming the step that failed */
long rrc_creds_apply(const struct rrc_creds *c, const char **what);

/* the calling thread's permitted and effective capability sets (capget);
 * 0 or -errno */
long rrc_creds_caps_self(uint64_t *permitted, uint64_t *effective);

/* the calling thread's four capability sets (capget; the ambient set by
 * PR_CAP_AMBIENT_IS_SET for each capability both permitted and
 * inheritable, the only ones it can hold); 0 or -errno */
long rrc_creds_thread_caps(struct rrc_thread_caps *t);

#endif /* RRC_CREDS_H */
