"""make data: the Penn Treebank as Mikolov prepared it, checked, under data/ptb.

    python scripts/get_data.py --out_dir=data/ptb [--url=URL]

docs/setup.md ("Data") describes the checks. Standard library only, so that `make data` works before `make setup`.
"""
import argparse
import gzip
import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib

DEFAULT_URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"  # as ptb_word_lm.py names it

# The files' MD5s as pytorch/text publishes them (torchtext/datasets/penntreebank.py).
PUBLISHED_MD5 = {
    "train": "f26c4b92c5fdc7b3f8c7cdcb991d8420",
    "valid": "aa0affc06ff7c36e977d7cd49e3839bf",
    "test": "8b80168b89c18661a38ef683c0dc3721",
}
# The archive's, as PaddlePaddle/Paddle publishes it (python/paddle/dataset/imikolov.py).
PUBLISHED_ARCHIVE_MD5 = "30177ea32e27c525793142b6bf2c8e2d"

SPLITS = ("train", "valid", "test")
MEMBER = "simple-examples/data/ptb.{}.txt"  # where each file lies in the archive (listed with a leading ./)
CHUNK = 1 << 16
PROGRESS_EVERY = 2.0  # seconds between progress lines while downloading


class Failure(Exception):
    """What went wrong, in one line: printed as `get_data: <message>`, exit status 2."""


def file_name(split):
    return f"ptb.{split}.txt"


def md5_of(path):
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def holds_the_files(directory, expected_md5):
    """Whether `directory` holds the three files with the expected checksums."""
    return all(os.path.isfile(os.path.join(directory, file_name(split)))
               and md5_of(os.path.join(directory, file_name(split))) == expected_md5[split] for split in SPLITS)


def download(url, destination, timeout):
    """Write the body at `url` to the open file `destination`; return its MD5. Fail on any error or a short body."""
    digest = hashlib.md5()
    received, total = 0, None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            announced = response.headers.get("Content-Length")
            total = int(announced) if announced and announced.isdigit() else None
            last_report = time.monotonic()
            while block := response.read(CHUNK):
                destination.write(block)
                digest.update(block)
                received += len(block)
                if time.monotonic() - last_report >= PROGRESS_EVERY:  # only a slow download reports
                    of_total = f" of {total / 1e6:.1f} MB" if total else ""
                    print(f"get_data: received {received / 1e6:.1f} MB{of_total}", flush=True)
                    last_report = time.monotonic()
    except urllib.error.HTTPError as error:  # before URLError: it is one
        raise Failure(f"{url}: HTTP {error.code} {error.reason}")
    except urllib.error.URLError as error:
        raise Failure(f"cannot download {url}: {error.reason}")
    except http.client.IncompleteRead:  # the connection closed before Content-Length bytes came
        raise Failure(f"download of {url} cut short: the connection closed after {received} of {total} bytes")
    except (http.client.HTTPException, OSError) as error:  # a reset connection, a timeout mid-body
        raise Failure(f"download of {url} failed after {received} bytes: {error or type(error).__name__}")
    except ValueError as error:  # not a URL urllib can fetch
        raise Failure(f"cannot download {url}: {error}")
    if total is not None and received != total:
        raise Failure(f"download of {url} cut short: {received} of {total} bytes")
    return digest.hexdigest()


def unpack(archive_path, directory, expected_md5):
    """Extract the three files from the archive into `directory`, checking each one's MD5."""
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            # Members are named by path alone and read through extractfile: nothing else in the archive is
            # written, wherever its names point.
            members = {member.name.removeprefix("./"): member for member in archive.getmembers()}
            for split in SPLITS:
                member = members.get(MEMBER.format(split))
                if member is None or not member.isfile():
                    raise Failure(f"the archive has no {MEMBER.format(split)}")
                target = os.path.join(directory, file_name(split))
                with archive.extractfile(member) as source, open(target, "wb") as copy:
                    shutil.copyfileobj(source, copy)
                found_md5 = md5_of(target)
                if found_md5 != expected_md5[split]:
                    raise Failure(f"{file_name(split)} in the archive has MD5 {found_md5}, "
                                  f"expected {expected_md5[split]}")
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:  # corrupt or cut short
        raise Failure(f"cannot read the archive (corrupt or cut short): {error or type(error).__name__}")


def parse_checksums(text):
    """--checksums=train:MD5,valid:MD5,test:MD5 (any subset) over the published ones."""
    expected = dict(PUBLISHED_MD5)
    for item in filter(None, text.split(",")):
        split, _, md5 = item.partition(":")
        if split not in SPLITS or len(md5) != 32:
            raise Failure(f"--checksums: expected split:md5 with split one of {', '.join(SPLITS)}, got {item!r}")
        expected[split] = md5.lower()
    return expected


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, as every other failure, rather than argparse's usage text
        raise Failure(message)


def main():
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="where to fetch simple-examples.tgz")
    parser.add_argument("--out_dir", default="data/ptb", help="where the three files go")
    parser.add_argument("--checksums", default="",
                        help="train:MD5,valid:MD5,test:MD5 instead of the published MD5s of the files")
    parser.add_argument("--archive_md5", default=PUBLISHED_ARCHIVE_MD5,
                        help="expected MD5 of the archive; empty: do not check the archive, only its files")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a connection may stay silent")
    args = parser.parse_args()
    expected_md5 = parse_checksums(args.checksums)
    url = args.url or DEFAULT_URL
    out_dir = os.path.normpath(args.out_dir)
    use_it = f"make verify DATA={out_dir}"

    if os.path.isdir(out_dir):
        if holds_the_files(out_dir, expected_md5):
            print(f"get_data: {out_dir} already holds the Penn Treebank (checksums match); use it: {use_it}")
            return
        raise Failure(f"{out_dir} exists but does not hold the three files with the expected checksums: "
                      f"remove it and run again")
    if os.path.exists(out_dir):
        raise Failure(f"{out_dir} exists and is not a directory")

    # Beside out_dir, on its file system, so that the final rename is atomic; dot names so that nothing
    # half-made looks like the data.
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    archive_fd, archive_path = tempfile.mkstemp(prefix=".get_data-", suffix=".tgz", dir=parent)
    unpack_dir = tempfile.mkdtemp(prefix=".get_data-", dir=parent)
    try:
        print(f"get_data: downloading {url}", flush=True)
        with os.fdopen(archive_fd, "wb") as archive:
            archive_md5 = download(url, archive, args.timeout)
        if args.archive_md5 and archive_md5 != args.archive_md5.lower():
            raise Failure(f"{url} has MD5 {archive_md5}, expected {args.archive_md5}")
        unpack(archive_path, unpack_dir, expected_md5)
        try:
            os.rename(unpack_dir, out_dir)
        except OSError as error:
            raise Failure(f"cannot move the files to {out_dir}: {error.strerror}")
    finally:
        os.remove(archive_path)
        shutil.rmtree(unpack_dir, ignore_errors=True)  # already gone when the rename succeeded
    print(f"get_data: the Penn Treebank is in {out_dir} ({', '.join(map(file_name, SPLITS))}; "
          f"checksums match); use it: {use_it}")


if __name__ == "__main__":
    try:
        main()
    except Failure as failure:
        print(f"get_data: {failure}", file=sys.stderr)
        sys.exit(2)
    except OSError as error:  # of this machine, not of the download: a directory it cannot write, a full disk
        print(f"get_data: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("get_data: interrupted", file=sys.stderr)
        sys.exit(2)
