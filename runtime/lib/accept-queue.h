/* SPDX-License-Identifier: MIT
 *
 * accept-queue.c: repaired connections handed to accept() after a restore
 * (ASYNC-SIGNAL-SAFE). The hand-off format from rrc-restore is
 * include/rrc/accept-queue.h.
 *
 * Without a replay, each connection waits behind a loopback "dummy" from
 * the restore on, for the application's next accept() on its listener.
 * With a replay on the clients' own connections (a failover in rr mode)
 * they are parked instead: a replayed accept whose recorded peer is one
 * of them takes it at the recorded fd number (the primary accepted that
 * connection after the checkpoint), and at go-live those left get their
 * dummies (the primary had not accepted them yet).
 */
#ifndef RRC_ACCEPT_QUEUE_LIB_H
#define RRC_ACCEPT_QUEUE_LIB_H

#define RRC_HIDDEN_AQ __attribute__((visibility("hidden")))

/* Constructor: the real accept/accept4. */
void rrc_aq_resolve(void) RRC_HIDDEN_AQ;
/* After a restore, before the release: read rrc-restore's table; park the
 * connections for a replay (park != 0) or queue them behind dummies. */
void rrc_aq_restore(int park) RRC_HIDDEN_AQ;
/* The replay is over (every thread goes live): parked connections are
 * queued behind dummies. Before any thread runs live. */
void rrc_aq_replay_over(void) RRC_HIDDEN_AQ;
/* Dump: 0, or -1 (error set) while some still wait. */
int rrc_aq_check(void) RRC_HIDDEN_AQ;

#endif /* RRC_ACCEPT_QUEUE_LIB_H */
