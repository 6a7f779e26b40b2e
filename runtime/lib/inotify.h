/* SPDX-License-Identifier: MIT
 *
 * inotify watches by path (issue 16 §4). The kernel keeps no path for a
 * watch, only the inode; a restore must add each watch again by a path,
 * so the library's inotify_add_watch wrapper (wrap-inotify.c) remembers
 * the absolute path each watch was added by, with the watched file's
 * device and inode, and the capture (inotify.c) names each watch the
 * fdinfo lists by it:
 *
 *     const struct rrc_inotify_ent *e = rrc_inotify_find(wd, dev, ino);
 *     if (!e) ...;                       // added without the wrapper: refused
 *
 * The table is the library's memory, in every image with the rest (a
 * restored process finds its watches' paths where they were); the pause
 * helper, whose copy of that memory is that of its start, reads the copy
 * the wrapper mirrors into its mailbox.
 */
#ifndef RRC_LIB_INOTIFY_H
#define RRC_LIB_INOTIFY_H
#include <stdint.h>
#include "rrc/image.h"

struct rrc_inotify_ent {
	uint64_t dev;             /* st_dev of the watched file at the add (user-space encoding) */
	uint64_t ino;
	int32_t  wd;
	uint32_t used;            /* set last (release), cleared first */
	char     path[RRC_INOTIFY_PATH_MAX]; /* absolute, NUL-terminated */
};

/* The entry naming watch wd on (dev, ino), or NULL. ASYNC-SIGNAL-SAFE. */
const struct rrc_inotify_ent *rrc_inotify_find(int32_t wd, uint64_t dev, uint64_t ino)
	__attribute__((visibility("hidden")));
/* The pause helper's mailbox copy of the table, filled at its start. */
void rrc_inotify_to_box(struct rrc_inotify_ent *box) __attribute__((visibility("hidden")));
#endif
