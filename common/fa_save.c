// fa_save.c - --save-dir and --csv written whole or not at all (fa_save.h).
#define _GNU_SOURCE
#include "fa_save.h"
#include "fa_tensor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// One run, one save: the state lives here, and an exit before fa_save_commit removes the partial folder.
static char save_dir[4096], partial[4200];
static int save_open;
static char csv_path[4096];
static int csv_created, csv_written;

// The names a run writes into its folder (and the temporary names fa_npy_save uses on the way).
static int is_run_file(const char *name) {
    static const char *const NAMES[] = {"q.npy", "k.npy", "v.npy", "do.npy", "o.npy", "lse.npy", "dq.npy", "dk.npy",
                                        "dv.npy", "command.txt", "checks.csv"};
    char base[256];
    snprintf(base, sizeof base, "%s", name);
    const size_t len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, ".tmp") == 0) base[len - 4] = '\0';
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(base, NAMES[i]) == 0) return 1;
    return 0;
}

// Removes a folder that holds only a run's files (and the folder). Returns 0, or -1 with errno set.
static int remove_run_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    return rmdir(dir);
}

static void remove_partial_at_exit(void) {
    if (save_open) remove_run_folder(partial);
    if (csv_created && !csv_written) unlink(csv_path);
}

static void register_cleanup(void) {
    static int registered;
    if (!registered) atexit(remove_partial_at_exit);
    registered = 1;
}

// mkdir -p for the parents of path (not path itself).
static void make_parents(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) fa_die("--save-dir: cannot create %s: %s", p, strerror(errno));
        *c = '/';
    }
}

void fa_save_begin(const char *dir) {
    snprintf(save_dir, sizeof save_dir, "%s", dir);
    size_t len = strlen(save_dir);
    while (len > 1 && save_dir[len - 1] == '/') save_dir[--len] = '\0';   // "run1/" is "run1"
    if (len == 0 || strcmp(save_dir, "/") == 0 || strcmp(save_dir, ".") == 0 || strcmp(save_dir, "..") == 0)
        fa_die("--save-dir %s: give a folder of its own (it is replaced by the run's files)", dir);
    struct stat st;
    if (stat(save_dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) fa_die("--save-dir %s exists and is not a folder", save_dir);
        // An earlier run's folder is replaced whole at the end; anything else in it would be lost: refuse it now.
        DIR *d = opendir(save_dir);
        if (!d) fa_die("--save-dir: cannot read %s: %s", save_dir, strerror(errno));
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || is_run_file(e->d_name)) continue;
            fa_die("--save-dir %s holds '%s', which no run writes: give a new or empty folder, or one a run saved",
                   save_dir, e->d_name);
        }
        closedir(d);
    } else if (errno != ENOENT) {
        fa_die("--save-dir: cannot use %s: %s", save_dir, strerror(errno));
    }
    make_parents(save_dir);
    snprintf(partial, sizeof partial, "%s.partial-%ld", save_dir, (long)getpid());
    remove_run_folder(partial);   // a leftover of a killed run with the same process id
    if (mkdir(partial, 0777) != 0) fa_die("--save-dir: cannot create %s: %s", partial, strerror(errno));
    save_open = 1;
    register_cleanup();
}

const char *fa_save_folder(void) { return save_open ? partial : NULL; }

void fa_save_text(const char *name, const char *text) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", partial, name);
    FILE *f = fopen(path, "w");
    if (!f) fa_die("cannot write %s: %s", path, strerror(errno));
    const size_t n = strlen(text);
    int err = fwrite(text, 1, n, f) == n ? 0 : errno;
    if (fflush(f) != 0 && !err) err = errno;
    if (fclose(f) != 0 && !err) err = errno;
    if (err) fa_die("writing %s failed: %s", path, strerror(err));
}

void fa_save_commit(void) {
    if (!save_open) return;
    // RENAME_EXCHANGE swaps the two folders in one step; where DIR does not exist yet, a plain rename suffices.
    if (renameat2(AT_FDCWD, partial, AT_FDCWD, save_dir, RENAME_EXCHANGE) == 0) {
        if (remove_run_folder(partial) != 0)   // the earlier run's set, now under the partial name
            fprintf(stderr, "warning: could not remove the earlier run's files in %s: %s\n", partial, strerror(errno));
    } else if (errno == ENOENT) {
        if (rename(partial, save_dir) != 0) fa_die("cannot rename %s to %s: %s", partial, save_dir, strerror(errno));
    } else if (errno == EINVAL || errno == ENOSYS) {
        // A file system without RENAME_EXCHANGE: move the old set aside first (a reader may see no folder for a
        // moment, never a mixed one).
        char old[4300];
        snprintf(old, sizeof old, "%s.old-%ld", save_dir, (long)getpid());
        if (rename(save_dir, old) != 0) fa_die("cannot rename %s to %s: %s", save_dir, old, strerror(errno));
        if (rename(partial, save_dir) != 0) fa_die("cannot rename %s to %s: %s", partial, save_dir, strerror(errno));
        remove_run_folder(old);
    } else {
        fa_die("cannot put %s in place of %s: %s", partial, save_dir, strerror(errno));
    }
    save_open = 0;
}

void fa_csv_begin(const char *path) {
    snprintf(csv_path, sizeof csv_path, "%s", path);
    struct stat st;
    const int existed = stat(path, &st) == 0;
    if (existed && S_ISDIR(st.st_mode)) fa_die("--csv %s is a folder", path);
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) fa_die("--csv: cannot append to %s: %s", path, strerror(errno));
    close(fd);
    csv_created = !existed;
    register_cleanup();
}

void fa_csv_append(const char *path, const char *text, size_t n) {
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) fa_die("cannot append to %s: %s", path, strerror(errno));
    struct stat st;
    const off_t before = fstat(fd, &st) == 0 ? st.st_size : -1;
    const ssize_t wrote = write(fd, text, n);
    int err = wrote < 0 ? errno : (size_t)wrote != n ? ENOSPC : 0;
    if (!err && fsync(fd) != 0 && errno != EINVAL) err = errno;   // (EINVAL: a device such as /dev/null)
    if (err) {
        if (before >= 0 && S_ISREG(st.st_mode) && ftruncate(fd, before) != 0) { /* reported below either way */ }
        close(fd);
        fa_die("writing %s failed: %s", path, strerror(err));
    }
    if (close(fd) != 0) fa_die("writing %s failed: %s", path, strerror(errno));
    if (strcmp(path, csv_path) == 0) csv_written = 1;
}
