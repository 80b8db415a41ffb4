// The ELF reader (SafeFile.checkSharedLibrary, .dynamicDependencies): which libraries a GPU provider
// needs is read from files on disk before any is loaded. Each input is written to a scratch file.
import Foundation
import FuzzSupport
@testable import MatteEngine

let path = FileManager.default.currentDirectoryPath + "/elf-input-\(getpid()).so"
fuzzMain { data in
    guard FileManager.default.createFile(atPath: path, contents: Data(data)) else { return }
    if let (soname, needed) = try? SafeFile.dynamicDependencies(path) {
        // (What it read are C strings from inside the file.)
        precondition(soname.map { !$0.utf8.contains(0) } ?? true)
        precondition(needed.allSatisfy { !$0.utf8.contains(0) })
    }
}
