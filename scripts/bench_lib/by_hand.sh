#!/usr/bin/env bash
# The by-hand backup a user would script instead of storebackup:
#   1. `sqlite3 DB ".backup COPY"` for each database (a consistent copy of a live
#      WAL database, found by its "SQLite format 3" header),
#   2. copy every other file into the same staging folder (without the databases'
#      -wal/-shm/-journal files, which the .backup copies already include),
#   3. `zip -r -q -LEVEL` the staging folder, then remove it.
#
#   by_hand.sh STORES_DIR STAGING_DIR ARCHIVE.zip [LEVEL]
set -euo pipefail

store=${1:?usage: by_hand.sh STORES_DIR STAGING_DIR ARCHIVE.zip [LEVEL]}
staging=${2:?staging folder missing}
archive=${3:?archive path missing}
level=${4:-6}

[ -d "$store" ] || { echo "by_hand: $store is not a folder" >&2; exit 1; }
[ ! -e "$staging" ] || { echo "by_hand: $staging already exists" >&2; exit 1; }
[ ! -e "$archive" ] || { echo "by_hand: $archive already exists" >&2; exit 1; }
archive=$(realpath -m "$archive")
mkdir -p "$staging"

# 1. The databases, by header (the first 16 bytes are "SQLite format 3\0").
databases=()
while IFS= read -r -d '' file; do
    if cmp -s -n 16 "$file" <(printf 'SQLite format 3\0'); then
        databases+=("${file#"$store"/}")
    fi
done < <(find "$store" -type f ! -name '*-wal' ! -name '*-shm' ! -name '*-journal' -print0)

exclude=()
for db in "${databases[@]}"; do
    mkdir -p "$staging/$(dirname "$db")"
    sqlite3 "$store/$db" ".backup '$staging/$db'"
    exclude+=(--exclude="./$db" --exclude="./$db-wal" --exclude="./$db-shm" --exclude="./$db-journal")
done

# 2. Everything else, with modes, times and empty folders.
tar -C "$store" "${exclude[@]}" -cf - . | tar -C "$staging" -xpf -

# 3. The archive.
(cd "$staging" && zip -r -q "-$level" "$archive" .)
rm -rf "$staging"
