/* SPDX-License-Identifier: MIT
 *
 * Regular files, directories and character devices: path (already in the
 * record), flags, and the offset, which the snapshot child shares with the
 * running parent and so must be read in the pause; for files and
 * directories, the locks they hold (file-locks.c).
 * ASYNC-SIGNAL-SAFE.
 */
#include <sys/stat.h>
#include "rrc_lib.h"

/* The devices of major 1 a restore can open again as they were (no state
 * of their own): null 3, zero 5, full 7, random 8, urandom 9. */
static int memory_device(uint32_t rdev)
{
	uint32_t major = (rdev >> 8) & 0xfff, minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
	return major == 1 && (minor == 3 || minor == 5 || minor == 7 || minor == 8 || minor == 9);
}

int rrc_capture_reg(struct rrc_fd *f, const char *link)
{
	if (S_ISREG(f->mode))
		f->kind = RRC_FD_REG;
	else if (S_ISDIR(f->mode))
		f->kind = RRC_FD_DIR;
	else if (S_ISCHR(f->mode)) {
		f->kind = RRC_FD_CHR;
		if (!memory_device(f->rdev)) {
			/* a terminal, a tun device, a GPU...: the restorer would
			 * open the path again and get another device, another
			 * terminal session or nothing */
			rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", f->fd, " is a character device (");
			size_t l = rrc_strlen(rrc_s->err_msg);
			l = rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, link);
			rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l,
				 ") whose state an image cannot carry: only /dev/null, zero, full, random and urandom are");
			return -1;
		}
	} else if (S_ISFIFO(f->mode)) {
		return rrc_capture_fifo(f, f->fd, link);
	} else {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", f->fd,
			    " is a file of an unsupported type (block device or socket file): ");
		size_t l = rrc_strlen(rrc_s->err_msg);
		rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, link);
		return -1;
	}
	long pos = rrc_sys_lseek(f->fd, 0, 1 /* SEEK_CUR */);
	f->pos = pos < 0 ? 0 : (uint64_t)pos;
	/* the locks it holds, the record's data (file-locks.c) */
	return f->kind == RRC_FD_CHR ? 0 : rrc_capture_locks(f, f->fd);
}
