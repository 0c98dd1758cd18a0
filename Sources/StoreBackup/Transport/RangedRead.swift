import Foundation

/// One ranged read of a remote object, shared by every backend: the request's limits and
/// the checks on the answer. A server may honour the range (`206` with a matching
/// `Content-Range`), answer it as rclone's S3 server does (`200` with the same
/// `Content-Range` and the partial body), or ignore it and send the whole object with
/// `200`. The last is accepted only for a small object, whose whole body fits the limit
/// of one answer; for a larger one the transfer stops at that limit and the failure says
/// so (``notHonoured``), so the caller can download the backup as a whole instead. Any
/// other answer (another range, another total, a short body) is ``notHonoured`` too.
enum RangedRead {
    /// The most bytes one request may ask for: a caller reading more splits its range.
    static let maxRequestBytes: Int64 = 8 << 20
    /// The largest object whose whole body stands in for a range the server ignored.
    static let maxWholeObjectBytes: Int64 = 8 << 20
    /// The service code of a failure where the server did not answer the range asked for.
    static let notHonoured = "RangeNotHonoured"
    /// The service code `CurlTransfer` gives an answer that outgrew its memory limit.
    static let answerTooLarge = "AnswerTooLarge"

    /// Where the bytes of a range go.
    enum Target: Sendable {
        /// Returned as `Data` (`ls` and `extract` read a few ranges).
        case memory
        /// Written at the range's own offset in this open file as they arrive (a whole
        /// backup fetched in parallel ranges): no answer is held in memory, and nothing is
        /// written outside the range.
        case file(descriptor: Int32)
    }

    /// `request` (a GET of the whole object) limited to `range` of an object of `size` bytes.
    static func request(
        _ request: TransferRequest, range: Range<Int64>, size: Int64, into target: Target = .memory
    ) throws -> TransferRequest {
        guard range.lowerBound >= 0, range.upperBound <= size, !range.isEmpty, Int64(range.count) <= maxRequestBytes else {
            throw StoreBackupError.transferFailed(
                .other, label: request.label, "cannot read bytes \(range.lowerBound)..<\(range.upperBound) of \(size)")
        }
        var ranged = request
        ranged.byteRange = range
        // Room for the whole object only when it is small enough to take in place of the range.
        let room = size <= maxWholeObjectBytes ? max(Int64(range.count), size) : Int64(range.count)
        switch target {
        case .memory:
            ranged.sink = .memory(limit: Int(room))
        case .file(let descriptor):
            // A whole object in place of the range fits only when the range is the whole
            // object; any other such answer overflows the range and is ``notHonoured``.
            ranged.sink = .positioned(descriptor: descriptor, offset: range.lowerBound, limit: range.count)
        }
        return ranged
    }

    /// Performs `request` (made by ``request(_:range:size:)``) through `perform`, turning an
    /// answer too large for a range into a ``notHonoured`` failure.
    static func perform(_ request: TransferRequest, _ perform: (TransferRequest) throws -> TransferResponse) throws -> TransferResponse {
        do {
            return try perform(request)
        } catch StoreBackupError.transfer(let failure) where failure.serviceCode == answerTooLarge {
            throw ignored(label: request.label)
        }
    }

    /// The bytes of `range` from a successful answer (`status` 200 or 206 over HTTP, 0 over
    /// sftp), after checking that they are the bytes asked for.
    /// With a `.file` target the bytes are already in the file and the result is empty;
    /// the same checks hold (the count is of the bytes written).
    static func bytes(
        of response: TransferResponse, range: Range<Int64>, size: Int64, label: String, target: Target = .memory
    ) throws -> Data {
        if case .file = target { return try checkWritten(response, range: range, size: size, label: label) }
        let body = response.body
        let wanted = Int(range.count)
        if response.status == 0 {
            // sftp: the file's bytes from the offset asked for; fewer means the file is shorter.
            guard body.count == wanted else { throw mismatch(label: label, "\(body.count) bytes instead of \(wanted)") }
            return body
        }
        if let header = response.header("content-range") {
            guard let answered = ContentRange(header), answered.first == range.lowerBound,
                answered.last == range.upperBound - 1, answered.total == nil || answered.total == size,
                body.count == wanted
            else { throw mismatch(label: label, "the range \(header) with \(body.count) bytes") }
            return body
        }
        guard response.status == 200 else { throw mismatch(label: label, "HTTP \(response.status) without a Content-Range") }
        // The whole object, range ignored.
        guard Int64(body.count) == size else {
            if Int64(body.count) > size { throw ignored(label: label) }
            throw mismatch(label: label, "\(body.count) bytes of an object of \(size)")
        }
        return body.subdata(in: Int(range.lowerBound)..<Int(range.upperBound))
    }

    /// The checks of ``bytes(of:range:size:label:target:)`` for an answer already written at
    /// the range's offset. Bytes written by an answer that fails them are never used: the
    /// caller marks nothing arrived and downloads the backup whole, or asks again.
    private static func checkWritten(_ response: TransferResponse, range: Range<Int64>, size: Int64, label: String) throws -> Data {
        let written = response.bytesWritten
        let wanted = Int64(range.count)
        if response.status == 0 {
            guard written == wanted else { throw mismatch(label: label, "\(written) bytes instead of \(wanted)") }
            return Data()
        }
        if let header = response.header("content-range") {
            guard let answered = ContentRange(header), answered.first == range.lowerBound,
                answered.last == range.upperBound - 1, answered.total == nil || answered.total == size,
                written == wanted
            else { throw mismatch(label: label, "the range \(header) with \(written) bytes") }
            return Data()
        }
        guard response.status == 200 else { throw mismatch(label: label, "HTTP \(response.status) without a Content-Range") }
        // The whole object, range ignored: usable only when the range is the whole object
        // (the sink wrote it from the range's start, which is then 0).
        guard range == 0..<size, written == size else {
            if written > wanted || size > wanted { throw ignored(label: label) }
            throw mismatch(label: label, "\(written) bytes of an object of \(size)")
        }
        return Data()
    }

    private static func ignored(label: String) -> StoreBackupError {
        StoreBackupError.transferFailed(
            .other, label: label, "the server does not answer byte ranges (it sent the whole backup)", serviceCode: notHonoured)
    }

    /// Bytes that are not those asked for (a server or proxy that gets ranges wrong, or a
    /// backup whose size is not the listed one): its answers to ranges cannot be used, and
    /// asking again would most likely get the same. Said as ``notHonoured``, so the caller
    /// downloads the backup instead.
    private static func mismatch(label: String, _ what: String) -> StoreBackupError {
        StoreBackupError.transferFailed(
            .other, label: label, "a ranged read got \(what), not the bytes asked for", serviceCode: notHonoured)
    }
}
