import CZip
import Foundation

/// Many libzip sources answered by one object, for entries as numerous as a store's files.
///
/// libzip keeps every entry's source until the archive is closed, so an object per source
/// would cost a store of many files an object per file. Here a source's context pointer is
/// the address of its slot in one table (8 bytes per source): the slot holds this object
/// (retained once per live source, released on ZIP_SOURCE_FREE), and its position is the
/// number the subclass is asked about in ``handle(slot:command:data:length:)``.
class ZipSourceTable {
    private let slots: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    let slotCount: Int
    /// What the last failed callback says to libzip (ZIP_SOURCE_ERROR).
    var error = zip_error_t()

    init(slotCount: Int) {
        self.slotCount = slotCount
        slots = .allocate(capacity: max(1, slotCount))
        slots.initialize(repeating: nil, count: max(1, slotCount))
        zip_error_init(&error)
    }

    deinit {
        slots.deallocate()
        zip_error_fini(&error)
    }

    /// Answers a command for the source in `slot` (all but SUPPORTS, ERROR and FREE).
    func handle(slot: Int, command: zip_source_cmd_t, data: UnsafeMutableRawPointer?, length: UInt64) -> Int64 {
        zip_error_set(&error, ZIP_ER_OPNOTSUPP, 0)
        return -1
    }

    /// Creates the libzip source of `slot`; libzip holds this object until it frees the source.
    func makeSource(in archive: OpaquePointer, slot index: Int) throws -> OpaquePointer {
        precondition(index >= 0 && index < slotCount && slots[index] == nil, "one source per slot")
        let slot = slots + index
        slot.pointee = Unmanaged.passRetained(self).toOpaque()
        guard let source = zip_source_function(archive, zipSourceTableTrampoline, UnsafeMutableRawPointer(slot)) else {
            Self.free(slot)
            throw StoreBackupError.archiveWrite(reason: String(cString: zip_strerror(archive)))
        }
        return source
    }

    /// Empties a slot and lets go of the object it held (which may end it: nothing after).
    private static func free(_ slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>) {
        guard let object = slot.pointee else { return }
        slot.pointee = nil
        Unmanaged<ZipSourceTable>.fromOpaque(object).release()
    }

    fileprivate static func answer(
        slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>, command: zip_source_cmd_t, data: UnsafeMutableRawPointer?,
        length: UInt64
    ) -> Int64 {
        guard let object = slot.pointee else { return -1 }
        let table = Unmanaged<ZipSourceTable>.fromOpaque(object).takeUnretainedValue()
        switch command {
        case ZIP_SOURCE_FREE:
            free(slot)
            return 0
        case ZIP_SOURCE_SUPPORTS:
            return ZipSourceCallbackObject.supportedCommands()
        case ZIP_SOURCE_ERROR:
            return zip_error_to_data(&table.error, data, length)
        default:
            return table.handle(slot: slot - table.slots, command: command, data: data, length: length)
        }
    }
}

private let zipSourceTableTrampoline: zip_source_callback = { context, data, length, command in
    ZipSourceTable.answer(
        slot: context!.assumingMemoryBound(to: UnsafeMutableRawPointer?.self), command: command, data: data, length: length)
}
