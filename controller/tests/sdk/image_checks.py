"""openstacksdk's image proxy (`conn.image`) against cumulo's Image v2 subset.

Run by controller/tests/api/sdk.rs: `CUMULO_REQUIRE_OPENSTACK=1 cargo test -p controller --test
api sdk`; by hand: `~/.cache/cumulo/openstack-venv/bin/python
controller/tests/sdk/image_checks.py WORLD.json` (WORLD.json: see cumulo_sdk.py). It expects a
fresh API: the public image of WORLD.json only.
"""

import hashlib
import io
import os
import tempfile
import uuid

from cumulo_sdk import Checks, connect, equal, exceptions, expect, load_world, raises

world = load_world()
public = world["image"]
alpha, beta = world["alice"]["project_id"], world["bob"]["project_id"]
check = Checks("image")

alice = connect(world, "alice")
bob = connect(world, "bob")

# Some bytes that are not all alike, over more than one of the SDK's 1 MiB download chunks.
DATA = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(40000))
MD5 = hashlib.md5(DATA).hexdigest()
SHA512 = hashlib.sha512(DATA).hexdigest()


def names(conn, **query):
    return sorted(i.name for i in conn.image.images(**query))


with check("images: the public image, get_image and find_image"):
    equal(names(alice), [public["name"]], "images()")
    got = alice.image.get_image(public["id"])
    equal((got.name, got.visibility, got.status), (public["name"], "public", "active"), "image")
    equal(alice.image.find_image(public["name"]).id, public["id"], "find_image(name)")
    equal(alice.image.find_image("no-such-image"), None, "find_image of nothing")

with check("get_image of an unknown id is ResourceNotFound (404)"):
    raises(exceptions.ResourceNotFound, alice.image.get_image, str(uuid.uuid4()), status=404)

with check("create_image with data (POST, then PUT .../file), checksum validated by the SDK"):
    created = alice.image.create_image(
        "sdk-image",
        data=DATA,
        disk_format="raw",
        container_format="bare",
        tags=["sdk", "first"],
        validate_checksum=True,
        os_distro="cirros",
        min_ram=64,
    )
    expect(created.id, "no id")

with check("get_image: active, size, checksum, sha512, formats, owner, tags, properties"):
    image = alice.image.get_image(created.id)
    equal(image.name, "sdk-image", "name")
    equal(image.status, "active", "status")
    equal(image.size, len(DATA), "size")
    equal(image.checksum, MD5, "checksum")
    equal((image.hash_algo, image.hash_value), ("sha512", SHA512), "os_hash_algo, value")
    equal((image.disk_format, image.container_format), ("raw", "bare"), "formats")
    equal(image.visibility, "private", "visibility")
    equal(image.owner, alpha, "owner")
    equal(sorted(image.tags), ["first", "sdk"], "tags")
    equal(image.os_distro, "cirros", "os_distro")
    equal(image.min_ram, 64, "min_ram")
    equal(image.is_protected, False, "protected")
    # The SDK records what it computed as properties of its own.
    equal(image.properties.get("owner_specified.openstack.md5"), MD5, "its md5 property")
    equal(image.properties.get("owner_specified.openstack.sha256"),
          hashlib.sha256(DATA).hexdigest(), "its sha256 property")

with check("images: list, filters name and visibility; another project does not see it"):
    equal(names(alice), sorted([public["name"], "sdk-image"]), "images()")
    equal([i.id for i in alice.image.images(name="sdk-image")], [image.id], "name filter")
    equal(names(alice, visibility="private"), ["sdk-image"], "visibility=private")
    equal(names(alice, visibility="public"), [public["name"]], "visibility=public")
    equal(alice.image.find_image("sdk-image").id, image.id, "find_image")
    equal(names(bob), [public["name"]], "bob's images()")
    raises(exceptions.ResourceNotFound, bob.image.get_image, image.id, status=404)

with check("images: pages of limit=1 (the SDK follows next)"):
    paged = sorted(i.name for i in alice.image.images(limit=1))
    equal(paged, sorted([public["name"], "sdk-image"]), "paged images")

with check("the image and member schemas"):
    schema = alice.image.get_image_schema()
    equal(schema.name, "image", "image schema's name")
    expect("os_hash_value" in schema.properties, f"properties {sorted(schema.properties)}")
    equal(alice.image.get_images_schema().name, "images", "images schema's name")
    equal(alice.image.get_member_schema().name, "member", "member schema's name")

with check("download_image: the same bytes (the SDK checks the sha512 as it reads)"):
    got = alice.image.download_image(image)
    data = got.content if hasattr(got, "content") else got
    equal(len(data), len(DATA), "length")
    equal(hashlib.md5(data).hexdigest(), MD5, "md5 of the download")
    expect(data == DATA, "the downloaded bytes differ")

with check("download_image to a file and streamed: the same bytes, Content-MD5 the checksum"):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "saved")
        alice.image.download_image(image, output=path)
        with open(path, "rb") as f:
            expect(f.read() == DATA, "the saved file differs")
    response = alice.image.download_image(image, stream=True)
    equal(response.headers.get("Content-MD5"), MD5, "Content-MD5")
    buffer = io.BytesIO()
    for chunk in response.iter_content(chunk_size=65536):
        buffer.write(chunk)
    expect(buffer.getvalue() == DATA, "the streamed bytes differ")

with check("update_image: name, min_disk, a property changed and one added (a JSON patch)"):
    updated = alice.image.update_image(image, name="sdk-image-2", min_disk=1,
                                       os_distro="ubuntu", sdk_note="hello")
    equal(updated.name, "sdk-image-2", "returned name")
    image = alice.image.get_image(image.id)
    equal((image.name, image.min_disk, image.os_distro), ("sdk-image-2", 1, "ubuntu"),
          "name, min_disk, os_distro")
    equal(image.properties.get("sdk_note"), "hello", "the new property")
    equal(image.status, "active", "status after")

with check("add_tag, remove_tag"):
    alice.image.add_tag(image, "second")
    alice.image.remove_tag(image, "first")
    equal(sorted(alice.image.get_image(image.id).tags), ["sdk", "second"], "tags")
    raises(exceptions.ResourceNotFound, alice.image.remove_tag, image, "first")

with check("a member may not change a public image (ForbiddenException)"):
    raises(exceptions.ForbiddenException, alice.image.update_image, public["id"], name="x",
           status=403)

with check("members: a shared image, add_member, members, get_member"):
    # By id: the SDK patches an Image object from what it last read of it (its tags before
    # add_tag/remove_tag would go back as a "/tags/1" patch, which Glance refuses too).
    alice.image.update_image(image.id, visibility="shared")
    member = alice.image.add_member(image, member=beta)
    equal(member.status, "pending", "new member's status")
    listed = list(alice.image.members(image))
    equal([m.status for m in listed], ["pending"], "members()")
    got = alice.image.get_member(beta, image)
    equal((got.image_id, got.status), (image.id, "pending"), "get_member")
    raises(exceptions.ConflictException, alice.image.add_member, image, member=beta,
           status=409)

with check("members: the member sees it by id, lists it only once it accepted (update_member)"):
    equal(bob.image.get_image(image.id).name, "sdk-image-2", "bob's get_image")
    equal(names(bob), [public["name"]], "bob's images() while pending")
    accepted = bob.image.update_member(beta, image, status="accepted")
    equal(accepted.status, "accepted", "status after")
    equal(names(bob), sorted([public["name"], "sdk-image-2"]), "bob's images() after")
    raises(exceptions.ForbiddenException, bob.image.update_image, image.id, name="theirs",
           status=403)

with check("members: remove_member; the project sees it no more"):
    alice.image.remove_member(beta, image, ignore_missing=False)
    equal(list(alice.image.members(image)), [], "members() after")
    raises(exceptions.ResourceNotFound, bob.image.get_image, image.id, status=404)

with check("create_image with use_import: no import method offered, the SDK refuses"):
    # cumulo has no interoperable image import (no OpenStack-image-import-methods header, as a
    # Glance without it): the SDK says so after the POST, and leaves that image queued.
    e = raises(exceptions.SDKException, alice.image.create_image, "sdk-import", data=b"x",
               disk_format="raw", container_format="bare", use_import=True)
    expect("does not support the image import method" in str(e), f"message {e}")
    left = alice.image.find_image("sdk-import", ignore_missing=False)
    equal((left.status, left.size, left.checksum), ("queued", None, None), "what is left")

with check("delete_image of a queued image (no data)"):
    alice.image.delete_image(left, ignore_missing=False)
    equal(alice.image.find_image("sdk-import"), None, "find_image after")

with check("a protected image is not deleted (ForbiddenException)"):
    alice.image.update_image(image.id, is_protected=True)
    raises(exceptions.ForbiddenException, alice.image.delete_image, image, ignore_missing=False,
           status=403)
    alice.image.update_image(image.id, is_protected=False)

with check("delete_image, then ResourceNotFound"):
    alice.image.delete_image(image, ignore_missing=False)
    raises(exceptions.ResourceNotFound, alice.image.get_image, image.id, status=404)
    raises(exceptions.ResourceNotFound, alice.image.delete_image, image.id,
           ignore_missing=False)
    equal(names(alice), [public["name"]], "images() after")

check.done()
