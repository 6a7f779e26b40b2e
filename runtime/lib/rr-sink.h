/* SPDX-License-Identifier: MIT
 *
 * rr-sink.c: where the record log's bytes go (issue 14 §2; RRC §4.5). The
 * writer thread (rr-log.c) hands it the log's header once, then each
 * batch; the sink puts them on one fd, as the bare log stream
 * (rrc/rrlog.h) or, with a key, as sealed rrc-wire frames: kind LogHeader
 * then LogBatch, each with HMAC-SHA256(key, frame number ‖ header ‖
 * payload), exactly what an agent's FrameReader checks
 * (crates/rrc-wire/src/session.rs). The sealed form is how the log goes
 * straight from the process to the backup, on a connection its agent
 * opened: nobody on the way can add, drop or change a batch unseen.
 *
 * The environment (read once by the constructor, then scrubbed):
 *   RRC_RECORD=PATH        the log file (created, truncated), or
 *   RRC_RECORD_FD=N        an open fd (a file, a connected socket)
 *   RRC_RECORD_KEY_FD=M    32 bytes of key on fd M (read, then closed):
 *                          the log goes as sealed frames
 *   RRC_RECORD_SEQ=S       the number of the first sealed frame (the
 *                          frames its agent sent on the connection before)
 *   RRC_RECORD_FRAMED=1    frames without a key (agents run with
 *                          --insecure-no-auth: frames without a MAC)
 *   RRC_RECORD_REPLACEABLE=1  a spare waits to be the next backup: a
 *                          connection that fails does not end the
 *                          recording, the log waits for the sink RECORD
 *                          hands over next (rrc_rr_sink_lost)
 *
 * Raw syscalls only (the writer must never record anything).
 */
#ifndef RRC_RR_SINK_H
#define RRC_RR_SINK_H

#include <stdint.h>
#include <stddef.h>
#include <sys/uio.h>

/* 1: a sink is open; 0: no recording asked for; -1: asked for but
 * impossible (logged why). */
int rrc_rr_sink_open(void) __attribute__((visibility("hidden")));
/* Whether fd is the sink's, or the one RECORD handed over that the
 * writer has not adopted yet (library fds: in no image; a checkpoint
 * taken between RECORD and the adoption put the new backup's log
 * connection in the image, and the next failover tried to repair it). */
int rrc_rr_sink_owns(int fd) __attribute__((visibility("hidden")));
/* Both fds (-1: none), for the pause helper, whose copy of this file's
 * state is that of its start (pause-helper.c), and the helper's side. */
void rrc_rr_sink_fds(int32_t *fd, int32_t *handed_fd) __attribute__((visibility("hidden")));
void rrc_rr_sink_mirror(int32_t fd, int32_t handed_fd) __attribute__((visibility("hidden")));
/* One unit of the log, whole: the header (header != 0) or one batch,
 * given as pieces of `len` bytes in all (at most 6). pieces[0] is copied;
 * with `held`, pieces[1..n) are the caller's memory that stays unchanged
 * until the next rrc_rr_sink_flush (the rings' bytes), and the unit may
 * wait for it (the writer's pass goes out in one sendmsg); without, the
 * unit and everything before it are written before this returns. 0, or
 * -errno (then the log is broken for good: a hole cannot be filled). */
long rrc_rr_sink_put(int header, const struct iovec *pieces, int n, uint32_t len, int held)
	__attribute__((visibility("hidden")));
/* The memory the sink keeps units waiting for a flush in: its size, and
 * the area (the log's region, rr-log.c) before the first unit. */
size_t rrc_rr_sink_area_size(void) __attribute__((visibility("hidden")));
void rrc_rr_sink_attach(void *area) __attribute__((visibility("hidden")));
/* Writes every unit waiting. 0 or -errno. */
long rrc_rr_sink_flush(void) __attribute__((visibility("hidden")));
/* 1 if the sink is a connection (to the backup): outputs wait for the
 * log there, so the writer drains at once when one is logged. */
int rrc_rr_sink_prompt(void) __attribute__((visibility("hidden")));
/* After a restore: the fd is not in the image. */
void rrc_rr_sink_forget(void) __attribute__((visibility("hidden")));
/* A recording that continues a replayed process: no sink yet, units are
 * dropped until one is handed over and adopted. */
void rrc_rr_sink_await(void) __attribute__((visibility("hidden")));
/* The writer, when the sink failed: 1 if it was replaceable (then it is
 * closed and units are dropped until RECORD hands the next one over: the
 * new backup's log begins at its first checkpoint's cut, after the hole),
 * 0 if the recording must stop. */
int rrc_rr_sink_lost(void) __attribute__((visibility("hidden")));
/* The control thread (RECORD): the sink's fd (a library fd), the
 * session's key (NULL: not sealed), the number of its first frame; it
 * replaces a replaceable sink, failed or not yet. 0, or -1 if no
 * recording awaits a sink. */
int rrc_rr_sink_hand(int fd, const uint8_t *key, uint64_t first_frame, int framed)
	__attribute__((visibility("hidden")));
/* The writer, at a pass: 1 if it just took the sink handed over (then it
 * writes the header first), 0 if nothing changed. */
int rrc_rr_sink_adopt(void) __attribute__((visibility("hidden")));

#endif /* RRC_RR_SINK_H */
