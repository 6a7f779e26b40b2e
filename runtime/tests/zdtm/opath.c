/* zdtm: O_PATH fds (issue 16 §4): a directory and a file opened with
 * O_PATH come back as O_PATH fds of the same objects, usable as what they
 * are: the directory as openat's base, the file through fstatat's
 * AT_EMPTY_PATH. Verify: F_GETFL shows O_PATH, the inodes are the same,
 * openat(dir, "data") reads the file's text.
 */
#include "zdtm.h"

#define DIR_FD 10
#define FILE_FD 11

static const char text[] = "through an O_PATH directory\n";

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	char dir[PATH_MAX], file[PATH_MAX + 8];
	snprintf(dir, sizeof dir, "%s/opath.d", zdtm_dir);
	snprintf(file, sizeof file, "%s/data", dir);
	zdtm_check(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir");
	int w = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	zdtm_check(w >= 0 && write(w, text, sizeof text - 1) == (ssize_t)sizeof text - 1, "write data");
	close(w);
	int d = open(dir, O_PATH | O_DIRECTORY), f = open(file, O_PATH);
	zdtm_check(d >= 0 && f >= 0, "open O_PATH");
	zdtm_check(dup2(d, DIR_FD) == DIR_FD && dup2(f, FILE_FD) == FILE_FD, "dup2");
	close(d);
	close(f);
	struct stat sd0, sf0;
	zdtm_check(stat(dir, &sd0) == 0 && stat(file, &sf0) == 0, "stat");

	zdtm_ready();
	zdtm_wait_verify();

	if (zdtm_corrupt)
		zdtm_check(dup2(open(zdtm_dir, O_PATH | O_DIRECTORY), DIR_FD) == DIR_FD, "corrupt");
	struct stat sd, sf;
	if (!(fcntl(DIR_FD, F_GETFL) & O_PATH) || !(fcntl(FILE_FD, F_GETFL) & O_PATH))
		zdtm_fail("F_GETFL without O_PATH: dir 0%o file 0%o", fcntl(DIR_FD, F_GETFL), fcntl(FILE_FD, F_GETFL));
	zdtm_check(fstatat(DIR_FD, "", &sd, AT_EMPTY_PATH) == 0 && fstatat(FILE_FD, "", &sf, AT_EMPTY_PATH) == 0, "fstatat");
	if (sd.st_ino != sd0.st_ino || sf.st_ino != sf0.st_ino)
		zdtm_fail("inodes dir %lu file %lu, not %lu %lu", (unsigned long)sd.st_ino, (unsigned long)sf.st_ino,
			  (unsigned long)sd0.st_ino, (unsigned long)sf0.st_ino);
	int r = openat(DIR_FD, "data", O_RDONLY);
	char got[64] = "";
	if (r < 0 || read(r, got, sizeof got - 1) != (ssize_t)sizeof text - 1 || strcmp(got, text))
		zdtm_fail("openat(dir fd, \"data\") gave \"%s\" (errno %d)", got, errno);
	zdtm_pass();
}
