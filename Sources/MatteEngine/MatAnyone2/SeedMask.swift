import Foundation

/// The seed-mask preparation of upstream's inference script (not of `InferenceCore`): the mask is
/// dilated then eroded with OpenCV's elliptic structuring element (a morphological closing, which
/// fills small holes and gaps), and becomes binary. See `prepare_seed_mask` in tools/matanyone2/glue.py.
enum SeedMask {
    /// `cv2.getStructuringElement(MORPH_ELLIPSE, (k, k))`: rows of ones of half-width
    /// round_half_even(c·√((r² − dy²)/r²)), r = c = k/2.
    static func ellipse(_ k: Int) -> [[Bool]] {
        let r = k / 2, c = k / 2
        var kernel = [[Bool]](repeating: [Bool](repeating: false, count: k), count: k)
        let inverseR2 = r > 0 ? 1.0 / Double(r * r) : 0
        for i in 0..<k {
            let dy = i - r
            guard abs(dy) <= r else { continue }
            let dx = Int((Double(c) * (Double(r * r - dy * dy) * inverseR2).squareRoot()).rounded(.toNearestOrEven))
            for j in max(c - dx, 0)..<min(c + dx + 1, k) { kernel[i][j] = true }
        }
        return kernel
    }

    /// Binary morphology, anchor at the kernel centre (k/2, k/2); cells outside the image are ignored.
    /// `dilate`: any set cell under the kernel; otherwise erode: all cells under the kernel set.
    static func morph(_ source: [Bool], width: Int, height: Int, kernel: [[Bool]], dilate: Bool) -> [Bool] {
        let k = kernel.count, anchor = k / 2
        var offsets: [(Int, Int)] = []
        for i in 0..<k { for j in 0..<k where kernel[i][j] { offsets.append((i - anchor, j - anchor)) } }
        var out = [Bool](repeating: false, count: source.count)
        for y in 0..<height {
            for x in 0..<width {
                var result = !dilate
                for (dy, dx) in offsets {
                    let sy = y + dy, sx = x + dx
                    guard sy >= 0, sy < height, sx >= 0, sx < width else { continue }
                    let set = source[sy * width + sx]
                    if dilate && set { result = true; break }
                    if !dilate && !set { result = false; break }
                }
                out[y * width + x] = result
            }
        }
        return out
    }

    /// A mask in [0, 1] (1 = the person) → seed alpha in {0, 1}, as upstream prepares it from its 8-bit
    /// mask: quantised to levels once, dilated where any level is set, eroded where not all are 255.
    /// (With neither, the quantised levels are returned as they are.)
    static func prepare(_ mask: [Float], width: Int, height: Int, dilate: Int = 10, erode: Int = 10) -> [Float] {
        let levels = mask.map { min(max($0 * 255 + 0.5, 0), 255).rounded(.down) }
        guard dilate > 0 || erode > 0 else { return levels.map { $0 / 255 } }
        // Binary from here on, converted back once: after a dilation every level is 0 or 255, so
        // "any level set" and "all 255" are the same cells.
        var set = dilate > 0
            ? morph(levels.map { $0 != 0 }, width: width, height: height, kernel: ellipse(dilate), dilate: true)
            : levels.map { $0 == 255 }
        if erode > 0 { set = morph(set, width: width, height: height, kernel: ellipse(erode), dilate: false) }
        return set.map { $0 ? 1 : 0 }
    }
}

/// A seed image named by the user, checked before a decoder opens it: a FIFO would block the decoder
/// (and the thread that asked) forever, and a huge file is not a mask.
public enum SeedImage {
    public static let maximumBytes = 256 << 20

    public static func check(_ path: String) throws {
        do {
            _ = try SafeFile.checkRegular(path, maxBytes: maximumBytes)
        } catch FileProblem.missing {
            throw EngineError.fileMissing(path: path, hint: "Set seed-mask to an existing image (white = the person).")
        } catch let problem as FileProblem {
            throw EngineError.fileUnreadable(path: path, detail: "it \(problem)")
        }
    }
}
