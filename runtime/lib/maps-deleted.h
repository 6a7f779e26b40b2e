/* SPDX-License-Identifier: MIT
 *
 * Mappings of files deleted since they were mapped (issue 16 §1, §4): a
 * binary or library upgraded under the running server (every `apt
 * upgrade` of libc or of the server's own package), a memfd mapped and
 * closed. The restorer maps a file again by its path, which such a file
 * no longer has: before, every dump was refused from the upgrade on, and
 * the service ran unprotected until it was restarted.
 *
 * A private mapping of such a file is turned, in the pause, into
 * anonymous memory holding the same bytes at the same addresses with the
 * same protection (maps-deleted.c says how, and what differs): from then
 * on it is memory like any other, carried whole by the next image (a VMA
 * new to the dirty tracking) and tracked after it. A shared one is
 * refused (its pages are the file's, which another writer could change),
 * and so is a private one whose file the process also holds open for
 * writing (its unwritten pages would stop following the file).
 *
 *     if (rrc_deleted_maps_check() < 0) ...   // before the pause: error set
 *     if (rrc_deleted_maps_convert() < 0) ... // in the pause, threads parked
 */
#ifndef RRC_LIB_MAPS_DELETED_H
#define RRC_LIB_MAPS_DELETED_H

int rrc_deleted_maps_check(void) __attribute__((visibility("hidden")));
int rrc_deleted_maps_convert(void) __attribute__((visibility("hidden")));
#endif
