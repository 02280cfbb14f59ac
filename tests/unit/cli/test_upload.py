from __future__ import annotations

import boto3
import pytest

from retrain.data.upload import check_dataset_name, find_files, likely_images, upload_files
from retrain.errors import BadDatasetNameError, EmptyFolderError, UsageError


def _tree(root, files):
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_every_file_is_uploaded_as_is_bad_ones_included(stack, tmp_path):
    # GIVEN a folder with a good image, an empty one, a text file and a file outside any label folder
    files = {"cat/a.jpg": b"\xff\xd8jpeg", "cat/empty.jpg": b"", "dog/notes.txt": b"hi", "loose.png": b"png"}
    root = _tree(tmp_path / "images", files)
    # WHEN it is uploaded to data set "pets"
    keys = upload_files(boto3.client("s3"), stack.output("data_bucket"), "pets", find_files(root))
    # THEN every file is at data/pets/<its path>, byte for byte: the control plane judges them, not the CLI
    assert sorted(keys) == sorted(f"data/pets/{relative}" for relative in files)
    s3 = boto3.client("s3")
    for relative, data in files.items():
        body = s3.get_object(Bucket=stack.output("data_bucket"), Key=f"data/pets/{relative}")["Body"].read()
        assert body == data


def test_hidden_files_are_not_uploaded(tmp_path):
    # GIVEN a label folder with a hidden file and a hidden folder beside an image
    root = _tree(tmp_path, {"cat/a.jpg": b"x", "cat/.DS_Store": b"x", ".git/config": b"x"})
    # THEN only the image is found
    assert [f.relative for f in find_files(root)] == ["cat/a.jpg"]


def test_empty_folder_is_an_error_that_says_what_to_do(tmp_path):
    # GIVEN a folder with only empty label folders
    (tmp_path / "cat").mkdir()
    # WHEN its files are listed
    with pytest.raises(EmptyFolderError) as raised:
        find_files(tmp_path)
    # THEN the error names the folder and the layout to use
    assert str(tmp_path) in str(raised.value)
    assert "DIR/<label>/<image>.jpg" in str(raised.value)


def test_missing_folder_is_an_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        find_files(tmp_path / "nope")


@pytest.mark.parametrize("name", ["", "has space", "-leading", "a/b", "x" * 41, "ünïcode"])
def test_bad_dataset_names_are_refused_with_the_rule(name):
    with pytest.raises(BadDatasetNameError) as raised:
        check_dataset_name(name)
    assert "letters, digits, '-' or '_'" in str(raised.value)


@pytest.mark.parametrize("name", ["digits", "flowers-2026", "a_b", "X1"])
def test_good_dataset_names_pass(name):
    assert check_dataset_name(name) == name


def test_likely_images_are_non_empty_images_in_label_folders(tmp_path):
    # GIVEN a good image, an empty one, a text file, a loose image and one nested too deep
    files = {"cat/a.JPG": b"x", "cat/e.jpg": b"", "cat/n.txt": b"x", "loose.png": b"x", "cat/sub/b.png": b"x"}
    root = _tree(tmp_path, files)
    # THEN only the first is counted as a likely accepted upload
    assert [f.relative for f in likely_images(find_files(root))] == ["cat/a.JPG"]
