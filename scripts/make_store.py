#!/usr/bin/env python3
"""Generates a realistic app stores directory for demos, tests and benchmarks.

    python3 scripts/make_store.py DIR [--size-mb N] [--seed S]
    python3 scripts/make_store.py DIR --files N [--blob-kib MIN-MAX] [--seed S]

DIR (which must not exist, or be empty) gets:
  App.sqlite            WAL mode, ~80% of the size: rows of text (id, created_at, title,
                        body, amount) with an index on created_at; its -wal file is left
                        non-empty, as a running app leaves it
  .App_SUPPORT/_EXTERNAL_DATA/<UUID>
                        blobs of 128 KiB, ~20% of the size: half random bytes (like
                        JPEGs), half compressible (repeated structured text)
  Settings.sqlite       a small database in rollback-journal mode, key/value table
  Caches/Empty/         an empty folder
  notes.txt             a plain file
  .secret-config        a file with mode 0600

With --files N the store is many small files instead (an app that keeps every large
attribute as its own file): N blobs of 1-16 KiB under .App_SUPPORT/_EXTERNAL_DATA/<UUID>
(half random, half compressible), App.sqlite of about 8 MiB in WAL mode, Settings.sqlite.
--blob-kib 1-1 makes every blob 1 KiB (the million-file run: 1 GiB instead of 8.5).

The same --seed gives the same contents. Standard library only.
"""
import argparse
import os
import random
import sqlite3
import sys
import uuid

BLOB_SIZE = 128 << 10
BATCH_ROWS = 5000
WAL_ROWS = 3000

# Common words of a household/shopping/notes app, ordered roughly by how often they
# are used; a Zipf-like weighting over this list gives text that compresses like
# real prose (about 3:1 with deflate), not like a tiny repeated vocabulary.
WORDS = """
the a to and of for in on with at from by this that it is was be are have has not
list buy get need make check call send pay pick remember bring order book plan try
milk bread eggs butter cheese apples bananas coffee tea rice pasta tomatoes onions
garlic pepper salt sugar flour yogurt chicken fish beans lentils soup carrots potatoes
lettuce spinach oranges lemons grapes berries cereal oats honey jam juice water wine
beer cookies crackers chips nuts olive oil vinegar mustard ketchup mayo sauce spices
market store aisle basket receipt price discount coupon weekly monthly daily family
dinner lunch breakfast snack party weekend holiday birthday guests kids school office
meeting appointment doctor dentist bank post car gym garden kitchen bathroom bedroom
laundry cleaning dishes groceries pharmacy vitamins soap shampoo toothpaste towels
paper batteries bulbs tape glue stamps envelopes gift card flowers candles napkins
morning afternoon evening tonight tomorrow today yesterday monday tuesday wednesday
thursday friday saturday sunday january february march april may june july august
september october november december early late soon later before after during again
small large fresh organic frozen cheap expensive favourite new old extra more less
two three four five six dozen half pound kilo bottle pack box bag can jar loaf
remember forgot almost finished ran out stock up replace return cancel confirm
john mary alex sam emma noah olivia liam sophia lucas mom dad grandma neighbours
recipe ingredients bake roast grill boil chop mix serve leftovers freezer fridge
budget total spent saved split owe paid cash transfer account bill rent electricity
""".split()

# Zipf-like weights as repetitions, so that a uniform pick (fast) follows them.
POOL = [word for rank, word in enumerate(WORDS) for _ in range(max(1, round(60 / (rank + 2))))]


def words(rng, count):
    return rng.choices(POOL, k=count)


def sentence(rng, count):
    text = " ".join(words(rng, count))
    return text[:1].upper() + text[1:] + "."


def rows(rng, count, start):
    """count rows (created_at, title, body, amount); body is 2-9 sentences of 5-16 words."""
    choices, randrange = rng.choices, rng.randrange
    for i in range(count):
        day = start + i // 500
        hour, rest = divmod(randrange(86400), 3600)
        lengths = [randrange(5, 17) for _ in range(randrange(2, 10))]
        title_words = randrange(2, 6)
        picked = choices(POOL, k=sum(lengths) + title_words)
        sentences = []
        pos = title_words
        for n in lengths:
            text = " ".join(picked[pos:pos + n])
            pos += n
            sentences.append(text[0].upper() + text[1:] + ".")
        title = " ".join(picked[:title_words])
        yield (f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d} {hour:02d}:{rest // 60:02d}:{rest % 60:02d}",
               title[0].upper() + title[1:], " ".join(sentences), randrange(1, 100_001))


def file_size(path):
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def make_blobs(rng, folder, total):
    os.makedirs(folder, exist_ok=True)
    count = max(2, round(total / BLOB_SIZE))
    for index in range(count):
        name = str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper()
        if index % 2 == 0:
            data = rng.randbytes(BLOB_SIZE)  # incompressible, like a JPEG
        else:
            # Structured and repetitive, like a plist or JSON export: compresses well.
            record = (f'{{"id": {index}, "kind": "attachment", "title": "{sentence(rng, 6)}", '
                      f'"tags": ["{" ".join(words(rng, 3))}"], "size": {rng.randint(1, 1 << 20)}}}\n').encode()
            data = (record * (BLOB_SIZE // len(record) + 1))[:BLOB_SIZE]
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    return count


def make_small_blobs(rng, folder, count, smallest=1, largest=16):
    """count blobs of smallest-largest KiB, half random and half structured text."""
    os.makedirs(folder, exist_ok=True)
    for index in range(count):
        name = str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper()
        size = rng.randint(smallest << 10, largest << 10)
        if index % 2 == 0:
            data = rng.randbytes(size)
        else:
            record = f'{{"id": {index}, "kind": "attachment", "title": "{sentence(rng, 6)}"}}\n'.encode()
            data = (record * (size // len(record) + 1))[:size]
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    return count


def make_app_database(rng, path, target):
    """Fills a WAL database to about target bytes and returns (connection, rows).

    The connection is returned still open, with the last WAL_ROWS rows committed to
    the WAL and not checkpointed; the caller must leave without closing it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-65536")
    db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, created_at TEXT NOT NULL, "
               "title TEXT NOT NULL, body TEXT NOT NULL, amount INTEGER NOT NULL)")
    db.execute("CREATE INDEX items_created_at ON items(created_at)")
    insert = "INSERT INTO items(created_at, title, body, amount) VALUES (?, ?, ?, ?)"
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    count = 0
    # Rows take ~600 bytes on disk with the index; estimate how many remain to reach
    # the target (page_count is the database's size including pages still in the WAL).
    while True:
        size = db.execute("PRAGMA page_count").fetchone()[0] * page_size
        remaining = target - size
        if remaining <= 0:
            break
        batch = max(200, min(BATCH_ROWS * 4, remaining // 600))
        db.execute("BEGIN")
        db.executemany(insert, rows(rng, batch, count))
        db.execute("COMMIT")
        count += batch
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # The last rows stay in the WAL, as a running app leaves it.
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("BEGIN")
    db.executemany(insert, rows(rng, WAL_ROWS, count))
    db.execute("COMMIT")
    count += WAL_ROWS
    return db, count


def make_settings(rng, path, app_rows):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE settings(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    values = [("theme", "dark"), ("sync", "nightly"), ("currency", "EUR"), ("rows", str(app_rows)),
              ("last_opened", "2026-11-22T09:30:00Z")]
    values += [(f"recent.{i}", sentence(rng, 4)) for i in range(50)]
    db.executemany("INSERT INTO settings VALUES (?, ?)", values)
    db.commit()
    db.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--size-mb", type=int, default=250, help="total size in MiB (default 250)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--files", type=int, help="many small files: N blobs of 1-16 KiB and an ~8 MiB database")
    parser.add_argument("--blob-kib", default="1-16", metavar="MIN-MAX",
                        help="with --files: the blobs' sizes in KiB (default 1-16)")
    args = parser.parse_args()
    try:
        smallest, largest = (int(part) for part in args.blob_kib.split("-"))
    except ValueError:
        parser.error("--blob-kib takes MIN-MAX, e.g. 1-16")
    if not 0 <= smallest <= largest:
        parser.error("--blob-kib: MIN must be at most MAX, both at least 0")
    if args.size_mb < 1:
        parser.error("--size-mb must be at least 1")
    if args.files is not None and args.files < 1:
        parser.error("--files must be at least 1")
    root = args.dir
    if os.path.exists(root) and (not os.path.isdir(root) or os.listdir(root)):
        parser.error(f"{root} exists and is not an empty folder")
    rng = random.Random(args.seed)
    total = args.size_mb << 20
    os.makedirs(root, exist_ok=True)

    blob_folder = os.path.join(root, ".App_SUPPORT", "_EXTERNAL_DATA")
    if args.files is not None:
        blobs = make_small_blobs(rng, blob_folder, args.files, smallest, largest)
        total = int(8 / 0.8 * (1 << 20))  # the database below: about 8 MiB
    else:
        blobs = make_blobs(rng, blob_folder, total * 0.2)
    os.makedirs(os.path.join(root, "Caches", "Empty"), exist_ok=True)
    with open(os.path.join(root, "notes.txt"), "w") as f:
        f.write("Weekly grocery list\n\n" + "\n".join("- " + sentence(rng, 5) for _ in range(20)) + "\n")
    secret = os.path.join(root, ".secret-config")
    with open(secret, "w") as f:
        f.write("api_token=not-a-real-token\nsync_key=0000-1111-2222\n")
    os.chmod(secret, 0o600)

    app_path = os.path.join(root, "App.sqlite")
    app, app_rows = make_app_database(rng, app_path, int(total * 0.8))
    make_settings(rng, os.path.join(root, "Settings.sqlite"), app_rows)

    wal = file_size(app_path + "-wal")
    if wal == 0:
        sys.exit(f"make_store: {app_path}-wal is missing or empty")
    files = size = 0
    for folder, _, names in os.walk(root):
        for name in names:
            files += 1
            size += os.path.getsize(os.path.join(folder, name))
    print(f"make_store: {root}: {files} files, {size} bytes ({size / (1 << 20):.1f} MiB); "
          f"App.sqlite {app_rows} rows, WAL {wal} bytes; {blobs} blobs", flush=True)
    sys.stderr.flush()
    # Leave without closing App.sqlite: closing the last connection would checkpoint
    # and delete the WAL. Nothing else is open or buffered at this point.
    assert app is not None
    os._exit(0)


if __name__ == "__main__":
    main()
