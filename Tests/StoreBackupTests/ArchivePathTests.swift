import Foundation
import XCTest

@testable import StoreBackup

final class ArchivePathTests: XCTestCase {
    func testUnsafePathsAreRecognised() {
        for path in ["a/b.txt", ".hidden/x", "a/.b/c"] { XCTAssertTrue(ArchiveReader.isSafeRelativePath(path), path) }
        // A backslash is an ordinary character of a Linux name (issue 32).
        for path in ["...", "a/...", "a/.b.", "..a", "é/ü", "a\\b", "..\\x"] { XCTAssertTrue(ArchiveReader.isSafeRelativePath(path), path) }
        for path in ["", "/abs", "../x", "a/../../x", "a//b", "./a", "a/..", "x\0y", "a/", ".", "..", "a/./b"] {
            XCTAssertFalse(ArchiveReader.isSafeRelativePath(path), path)
        }
    }

    func testLinksMustStayInside() {
        XCTAssertTrue(ArchiveReader.isContainedLink(linkPath: "a/link", target: "../notes.txt"))
        XCTAssertTrue(ArchiveReader.isContainedLink(linkPath: "link", target: "sub/file"))
        XCTAssertFalse(ArchiveReader.isContainedLink(linkPath: "a/link", target: "../../etc/passwd"))
        XCTAssertFalse(ArchiveReader.isContainedLink(linkPath: "link", target: "/etc/passwd"))
        XCTAssertFalse(ArchiveReader.isContainedLink(linkPath: "link", target: ".."))
    }

    func testExtendedTimestampRoundTrips() {
        XCTAssertEqual(ZipTimestamp.decode(ZipTimestamp.encode(modificationTime: 1_600_000_001)), 1_600_000_001)
        XCTAssertNil(ZipTimestamp.decode([0x00, 1, 2, 3, 4]))
    }

    func testCompressionLevelsParse() {
        XCTAssertEqual(CompressionLevel.parse("fast"), 1)
        XCTAssertEqual(CompressionLevel.parse("best"), 9)
        XCTAssertEqual(CompressionLevel.parse("0"), 0)
        XCTAssertNil(CompressionLevel.parse("10"))
        XCTAssertNil(CompressionLevel.parse("quick"))
    }

    func testDestinationResolution() throws {
        XCTAssertEqual((try DestinationResolver.resolve("file:///var/backups") as? LocalFolderDestination)?.folder, "/var/backups")
        XCTAssertEqual(DestinationResolver.defaultFolder(environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"]), "/x/storebackup/backups")
        XCTAssertEqual(DestinationResolver.defaultFolder(environment: ["HOME": "/h"]), "/h/.local/share/storebackup/backups")
        XCTAssertThrowsError(try DestinationResolver.resolve("ftp://host/x"))
    }

    func testS3URLsParseToBucketAndPrefix() throws {
        let options = DestinationOptions(
            s3Endpoint: "http://127.0.0.1:9", environment: ["AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret"])
        XCTAssertEqual(try S3Destination.make(url: "s3://bucket/a//b/", options: options).displayName, "s3://bucket/a/b")
        XCTAssertEqual(try S3Destination.make(url: "s3://my.bucket", options: options).displayName, "s3://my.bucket")
        XCTAssertEqual(try S3Destination.make(url: "s3://bucket/with%20space", options: options).prefix, "with space")
        for bad in ["s3://", "s3:///prefix", "s3://bucket:9000/x", "s3://bucket/x?versionId=1", "s3://bucket/../x", "s3://b%C3%BC/x"] {
            XCTAssertThrowsError(try S3Destination.make(url: bad, options: options), bad)
        }
        // Keys in the URL are refused without being echoed.
        XCTAssertThrowsError(try S3Destination.make(url: "s3://AKIA:s3cr3t@bucket/x", options: options)) { error in
            XCTAssertFalse("\(error)".contains("s3cr3t"), "\(error)")
        }
    }
}
