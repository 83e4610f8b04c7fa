"""What `public_data.py`'s builders share: the data archive of a Debian package, and an
output folder written beside its place and renamed into it whole."""

import contextlib
import io
import os
import shutil
import tarfile

from cmlm_tf.files import staged_folder


def deb_data(package: bytes) -> tarfile.TarFile:
    """The data archive of a .deb (an `ar` archive holding `data.tar.*`)."""
    if not package.startswith(b"!<arch>\n"):
        raise ValueError("not a Debian package (.deb)")
    position = 8
    while position + 60 <= len(package):
        name = package[position:position + 16].decode("ascii").strip().rstrip("/")
        size = int(package[position + 48:position + 58].decode("ascii"))
        start = position + 60
        if name.startswith("data.tar"):
            return tarfile.open(fileobj=io.BytesIO(package[start:start + size]))
        position = start + size + (size % 2)
    raise ValueError("the .deb holds no data.tar")


@contextlib.contextmanager
def staged(output: str):
    """A folder beside `output` (`staged_folder`, as exports use), moved to `output` when
    the block ends without an error, removed otherwise."""
    output = os.path.abspath(output)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    folder = staged_folder.owned_tempdir(output)
    try:
        yield folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    staged_folder.replace_dir(folder, output, overwrite=False)
