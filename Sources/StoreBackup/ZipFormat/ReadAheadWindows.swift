import Foundation

/// A few read-ahead windows over an archive for one libzip source (``ZipSource``), so that
/// libzip's many short reads (a local header, a small entry's data) cost one `pread` per
/// window instead of one or two each.
///
/// Restore's threads share one libzip handle and take turns on it, each working through its
/// own part of the archive; one window would be thrown away at every turn. Each window
/// follows one such stream: a read just past a window's end refills that window in full
/// (reading on), any other miss takes the least recently used window and fills only what a
/// small entry needs (a jump). Reads as large as a window bypass them.
final class ReadAheadWindows {
    static let count = 4
    /// What a jump reads: one small entry's local header and data.
    static let jumpBytes = 16 << 10

    private struct Window {
        var buffer: UnsafeMutableRawBufferPointer
        var start: Int64 = 0
        var count = 0
        var lastUse = 0
        var end: Int64 { start + Int64(count) }
    }

    private var windows: [Window]
    private var clock = 0
    let windowBytes: Int

    init(windowBytes: Int) {
        self.windowBytes = windowBytes
        windows = (0..<Self.count).map { _ in Window(buffer: .allocate(byteCount: windowBytes, alignment: 16)) }
    }

    deinit { for window in windows { window.buffer.deallocate() } }

    /// Bytes at `position` into `buffer`, as many as one window (or one direct read) gives;
    /// 0 at the end. `read` reads the archive.
    func read(
        at position: Int64, into buffer: UnsafeMutableRawBufferPointer,
        from read: (Int64, UnsafeMutableRawBufferPointer) throws -> Int
    ) throws -> Int {
        guard buffer.count < windowBytes else { return try read(position, buffer) }
        clock += 1
        let index: Int
        if let holding = windows.firstIndex(where: { position >= $0.start && position < $0.end }) {
            index = holding
        } else {
            let readingOn = windows.firstIndex { position >= $0.end && position - $0.end < Int64(windowBytes) }
            index = readingOn ?? windows.indices.min { windows[$0].lastUse < windows[$1].lastUse }!
            let length = readingOn != nil ? windowBytes : max(buffer.count, Self.jumpBytes)
            windows[index].count = 0
            windows[index].count = try read(position, UnsafeMutableRawBufferPointer(rebasing: windows[index].buffer[0..<length]))
            windows[index].start = position
            if windows[index].count == 0 { return 0 }
        }
        windows[index].lastUse = clock
        let window = windows[index]
        let from = Int(position - window.start)
        let count = min(buffer.count, window.count - from)
        buffer.baseAddress!.copyMemory(from: window.buffer.baseAddress! + from, byteCount: count)
        return count
    }
}
