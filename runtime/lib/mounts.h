/* SPDX-License-Identifier: MIT
 *
 * Mounts the process made (issue 16 §1, §4). rrc starts every process in
 * a mount namespace of its own, private from the host's (rrc-container),
 * so its mount table changes only by the process's own mount and umount.
 * A restore gets a fresh namespace with the table the container starts
 * with: a tmpfs the process mounted, and every file on it, would be gone
 * (the restore fails at the first fd or mapping on it, at a failover).
 * Mounts are not carried yet: a dump is refused, naming the mount, when
 * the table has one the process did not start with (or was not restored
 * into).
 *
 *     rrc_mounts_remember();   // at the start, and after a restore
 *     if (rrc_mounts_check() < 0) ...  // before a dump: error set
 */
#ifndef RRC_LIB_MOUNTS_H
#define RRC_LIB_MOUNTS_H

void rrc_mounts_remember(void) __attribute__((visibility("hidden")));
int rrc_mounts_check(void) __attribute__((visibility("hidden")));
#endif
