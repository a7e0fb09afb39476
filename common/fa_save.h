// fa_save.h - what a run writes (--save-dir, --csv), whole or not at all.
//
// --save-dir DIR: the run's files (inputs, outputs, command.txt, checks.csv) are written into a new folder beside it,
// DIR.partial-PID, and only when the run finishes is that folder put in DIR's place with one rename (renameat2's
// RENAME_EXCHANGE when DIR is already there: a reader sees the old set or the new one, never a mix). A run that stops
// early (bad input, memory, a failed write) removes its partial folder and leaves DIR as it was. DIR may be new, empty,
// or a folder an earlier run saved (it then holds only the names a run writes: its set is replaced whole); a folder
// with other files is refused before anything is computed, so that no one's files are deleted.
// --csv FILE: opened for appending before anything is computed; the run's rows are appended with one write, and a
// write that fails is cut back off, so the file ends with whole rows.
// Every failure is one line naming the file and the system's reason, and exit status 2.
#ifndef FA_SAVE_H
#define FA_SAVE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>

// Checks DIR and makes the partial folder (and DIR's missing parents). Exits 2 when DIR cannot take a run's files.
void fa_save_begin(const char *dir);
// The folder the run's files go to now (the partial folder), or NULL when there is no --save-dir.
const char *fa_save_folder(void);
// Writes text as the file `name` of the partial folder (checked: a full disk is an error, not a short file).
void fa_save_text(const char *name, const char *text);
// Puts the partial folder in DIR's place (the earlier run's set, if any, is removed). Exits 2 on failure.
void fa_save_commit(void);

// Checks that path can be appended to (creating it when it does not exist). Exits 2 when it cannot.
void fa_csv_begin(const char *path);
// Appends n bytes to path with one write; on failure the file is cut back to its old size and the run exits 2.
void fa_csv_append(const char *path, const char *text, size_t n);

#ifdef __cplusplus
}
#endif

#endif
