import MattePixels

/// Motion-adaptive temporal smoothing of a per-frame matte (the segmenter's, which has no memory of
/// its own and flickers at soft, uncertain edges from frame to frame). Each pixel's matte moves
/// toward the new one by a weight that depends on how much the picture itself changed there: where
/// the image is still, the matte changes slowly (flicker is averaged away); where the image moves,
/// the weight goes to 1 and the matte follows at once (a moving person never trails behind).
///
///   weight = floor + (1 − floor) · min(1, |ΔY| / motionScale),  floor = 1 − strength
///   matte  = matte + weight · (new − matte)
///
/// ΔY is the luma change at the model's resolution, averaged over a 3×3 neighbourhood so that
/// sensor noise does not count as motion.
final class TemporalFilter {
    let width: Int, height: Int
    /// 0 (off) … 1 (a still pixel's matte hardly changes).
    let strength: Float
    /// Luma change (0…1) that counts as full motion: 0.06 is ~15 grey levels.
    let motionScale: Float
    private var matte: [Float]
    private var luma: [Float]
    private var change: [Float]
    private var primed = false

    init(width: Int, height: Int, strength: Float, motionScale: Float = 0.06) {
        self.width = width
        self.height = height
        self.strength = min(max(strength, 0), 1)
        self.motionScale = motionScale
        matte = [Float](repeating: 0, count: width * height)
        luma = [Float](repeating: 0, count: width * height)
        change = [Float](repeating: 0, count: width * height)
    }

    /// Forgets the past (a new stream, a seek).
    func reset() { primed = false }

    /// Smooths `values` (the new matte, in place) given the frame's RGB at the same resolution
    /// (`rgb(index)` → r, g, b in 0…1).
    func apply(_ values: UnsafeMutablePointer<Float>, rgb: (Int) -> (Float, Float, Float)) {
        guard strength > 0 else { return }
        // Through buffer pointers: a class's array properties indexed per pixel would pay an
        // exclusivity check and a uniqueness check on every access (~10 % of a segmenter frame).
        let wasPrimed = primed
        primed = true
        matte.withUnsafeMutableBufferPointer { matte in
        luma.withUnsafeMutableBufferPointer { luma in
        change.withUnsafeMutableBufferPointer { change in
            smooth(values, rgb: rgb, matte: matte, luma: luma, change: change, primed: wasPrimed)
        }}}
    }

    private func smooth(_ values: UnsafeMutablePointer<Float>, rgb: (Int) -> (Float, Float, Float),
                        matte: UnsafeMutableBufferPointer<Float>, luma: UnsafeMutableBufferPointer<Float>,
                        change: UnsafeMutableBufferPointer<Float>, primed: Bool) {
        let count = width * height, width = self.width, height = self.height
        guard primed else {
            for i in 0..<count {
                let (r, g, b) = rgb(i)
                luma[i] = 0.299 * r + 0.587 * g + 0.114 * b
                matte[i] = values[i]
            }
            return
        }
        // Every pixel is computed alone from the previous pass: rows run in slices on the cores (the
        // same arithmetic per pixel, so the same values), the change everywhere before the blend.
        let slices = Slices.count(work: .max)
        Slices.forEach(of: height, slices: slices) { rows, _ in
            for i in (rows.lowerBound * width)..<(rows.upperBound * width) {
                let (r, g, b) = rgb(i)
                let y = 0.299 * r + 0.587 * g + 0.114 * b
                change[i] = abs(y - luma[i])
                luma[i] = y
            }
        }
        let floor = 1 - strength, motionScale = self.motionScale
        Slices.forEach(of: height, slices: slices) { rows, _ in
            for y in rows {
                for x in 0..<width {
                    var total: Float = 0, cells: Float = 0
                    for dy in max(y - 1, 0)...min(y + 1, height - 1) {
                        for dx in max(x - 1, 0)...min(x + 1, width - 1) {
                            total += change[dy * width + dx]
                            cells += 1
                        }
                    }
                    let motion = min(1, total / cells / motionScale)
                    let weight = floor + (1 - floor) * motion
                    let i = y * width + x
                    matte[i] += weight * (values[i] - matte[i])
                    values[i] = matte[i]
                }
            }
        }
    }
}
