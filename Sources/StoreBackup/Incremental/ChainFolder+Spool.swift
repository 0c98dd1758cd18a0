import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The spool: the scheduler's points that were built while their destination could not be
/// reached, kept in the chain state folder (`spool/`, under their backup names) until they
/// go out, oldest first. The chain state names them (``ChainState/spooled``) among its links,
/// so the next point applies to the newest of them, and a crash leaves either the state
/// before a point was spooled or after (the archive is in place before the state names it).
extension ChainFolder {
    /// The spool's folder.
    var spoolFolder: String { path + "/spool" }

    /// Where spooled point `name` is kept.
    func spoolPath(of name: String) -> String { spoolFolder + "/" + name }

    /// Copies the archive `file` into the spool as `name`, durably.
    func spool(file: String, as name: String) throws {
        try FileSystem.createDirectories(spoolFolder, mode: 0o700)
        _ = ScratchFiles.sweep(spoolFolder)
        try Self.copyDurably(file, to: spoolPath(of: name), scratch: ScratchFiles.path(in: spoolFolder, purpose: "spool"))
        try FileSystem.fsync(path: spoolFolder)
    }

    /// Records that spooled point `name` reached the destination: the state stops naming it
    /// (durably), then its file goes.
    func unspool(_ name: String) throws {
        guard var state = peek() else { return }
        state.spooled = state.spooled?.filter { $0.name != name }
        if state.spooled?.isEmpty == true { state.spooled = nil }
        try writeStateFile(state)
        unlink(spoolPath(of: name))
        try? FileSystem.fsync(path: spoolFolder)
    }
}
