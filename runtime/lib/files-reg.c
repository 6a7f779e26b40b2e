/* SPDX-License-Identifier: MIT
 *
 * Regular files, directories and character devices: path (already in the
 * record), flags, and the offset, which the snapshot child shares with the
 * running parent and so must be read in the pause.
 * ASYNC-SIGNAL-SAFE.
 */
#include <sys/stat.h>
#include "rrc_lib.h"

int rrc_capture_reg(struct rrc_fd *f, const char *link)
{
	if (S_ISREG(f->mode))
		f->kind = RRC_FD_REG;
	else if (S_ISDIR(f->mode))
		f->kind = RRC_FD_DIR;
	else if (S_ISCHR(f->mode))
		f->kind = RRC_FD_CHR;
	else {
		rrc_set_err(RRC_ERR_UNSUPPORTED_FD, 0, "fd ", f->fd,
			    " is a file of an unsupported type (fifo, block device or socket file): ");
		size_t l = rrc_strlen(rrc_s->err_msg);
		rrc_bput(rrc_s->err_msg, sizeof rrc_s->err_msg, l, link);
		return -1;
	}
	long pos = rrc_sys_lseek(f->fd, 0, 1 /* SEEK_CUR */);
	f->pos = pos < 0 ? 0 : (uint64_t)pos;
	return 0;
}
