import Foundation
import XCTest

@testable import StoreBackup

#if canImport(Glibc)
import Glibc
#endif

/// A backup is written once and read once: neither the archive create writes nor the one a
/// restore reads should stay in the page cache, where it would push out the app's own data.
/// Measured with mincore(2) on the archive after the command.
final class PageCacheTests: XCTestCase {
    var work = ""
    var store: String { work + "/Stores" }
    var backups: String { work + "/backups" }

    override func setUpWithError() throws {
        work = try TestEnvironment.temporaryDirectory("page-cache")
        try StoreFixture.make(at: store)
        // Incompressible, so the archive is at least this large.
        try writeRandomFile(store + "/.App_SUPPORT/photo.bin", bytes: 32 << 20)
    }

    override func tearDownWithError() throws {
        try? FileSystem.removeTree(work)
    }

    func testCreateLeavesLittleOfItsArchiveInThePageCache() throws {
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        let archive = try onlyArchive()
        try skipIfTheFileIsItsOwnCache(archive)
        // Without dropping, all of a just-written file is cached (the test below checks that reading caches it).
        let cached = try cachedFraction(archive)
        XCTAssertLessThan(cached, 0.25, "\(Int(cached * 100)) % of the new archive is still in the page cache")
    }

    func testRestoreDropsTheArchiveItReadFromThePageCache() throws {
        let created = try runStoreBackup(["create", store, "--to", backups])
        XCTAssertEqual(created.status, 0, created.stderr)
        let archive = try onlyArchive()
        try skipIfTheFileIsItsOwnCache(archive)
        try readWholeFile(archive)
        XCTAssertGreaterThan(try cachedFraction(archive), 0.9, "reading the archive should have cached it (else this test proves nothing)")

        let restored = try runStoreBackup(["restore", "latest", store, "--from", backups, "--yes"])
        XCTAssertEqual(restored.status, 0, restored.stderr)
        let cached = try cachedFraction(archive)
        XCTAssertLessThan(cached, 0.25, "\(Int(cached * 100)) % of the archive is still cached after the restore read it")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: store + "/.App_SUPPORT/photo.bin")).count, 32 << 20)
    }

    // MARK: Helpers

    private func onlyArchive() throws -> String {
        let names = try FileManager.default.contentsOfDirectory(atPath: backups).filter { $0.hasSuffix(" Stores.zip") }
        XCTAssertEqual(names.count, 1, "\(names)")
        return backups + "/" + (try XCTUnwrap(names.first))
    }

    /// tmpfs keeps files only in the page cache: nothing can be dropped there.
    private func skipIfTheFileIsItsOwnCache(_ path: String) throws {
        let type = try runTool("/usr/bin/stat", ["-f", "-c", "%T", path])
        XCTAssertEqual(type.status, 0, type.stderr)
        if type.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "tmpfs" {
            throw XCTSkip("\(path) is on tmpfs, whose pages are the file itself")
        }
    }

    private func writeRandomFile(_ path: String, bytes: Int) throws {
        var generator = SplitMix64(seed: 0x5EED)
        var data = Data(count: bytes)
        data.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for index in words.indices { words[index] = generator.next() }
        }
        try data.write(to: URL(fileURLWithPath: path))
    }

    private func readWholeFile(_ path: String) throws {
        let handle = try XCTUnwrap(FileHandle(forReadingAtPath: path))
        defer { try? handle.close() }
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {}
    }

    /// The share of the file's pages in the page cache (mincore on a shared mapping).
    private func cachedFraction(_ path: String) throws -> Double {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        var info = stat()
        XCTAssertEqual(fstat(fd, &info), 0)
        let size = Int(info.st_size)
        guard size > 0 else { return 0 }
        let mapping = try XCTUnwrap(mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0))
        XCTAssertNotEqual(mapping, MAP_FAILED)
        defer { munmap(mapping, size) }
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        var vector = [UInt8](repeating: 0, count: (size + pageSize - 1) / pageSize)
        XCTAssertEqual(mincore(mapping, size, &vector), 0, String(cString: strerror(errno)))
        return Double(vector.filter { $0 & 1 == 1 }.count) / Double(vector.count)
    }
}
