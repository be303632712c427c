//! A crash-simulating SQLite VFS for the power-loss tests (SQLite's own crash-test method,
//! in memory): every file keeps its last synced image and the writes (and truncations) made
//! since that sync, in order. At the armed I/O number the power is cut: each file's surviving
//! image is its synced image plus a random prefix of its unsynced writes, the first write past
//! the prefix possibly torn (a prefix of its bytes, whole 512-byte sectors; one time in four
//! the sector after that prefix holds garbage, since the device promises no power-safe
//! overwrite). From the cut on,
//! every write, truncation and sync fails with an I/O error, as a dead machine would; the test
//! then drops the store, restores the surviving images and reopens.
//!
//! Shared memory (the WAL index) lives in memory per database file and is lost at the cut,
//! as it is at a reboot. File locks always succeed: one connection at a time uses a file.
//! Deletions take effect at once (SQLite deletes nothing it still needs after a crash).
//!
//! It is written over `rusqlite::ffi` (the bundled SQLite rusqlite links, so the VFS is
//! registered in the very library the store uses). Unsafe code is confined to this file.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::ptr;
use std::sync::{Mutex, MutexGuard};

use rusqlite::ffi;

/// The sector size reported to SQLite and the granularity of a torn write.
const SECTOR: usize = 512;
const SHM_LOCKS: usize = ffi::SQLITE_SHM_NLOCK as usize;

/// A change made to a file since its last sync.
#[derive(Clone)]
enum Change {
    Write { offset: usize, data: Vec<u8> },
    Truncate(usize),
}

impl Change {
    fn apply(&self, bytes: &mut Vec<u8>) {
        match self {
            Change::Write { offset, data } => write_at(bytes, *offset, data),
            Change::Truncate(size) => bytes.truncate(*size),
        }
    }
}

fn write_at(bytes: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if bytes.len() < offset + data.len() {
        bytes.resize(offset + data.len(), 0);
    }
    bytes[offset..offset + data.len()].copy_from_slice(data);
}

#[derive(Default, Clone)]
struct FileData {
    /// What reads see.
    current: Vec<u8>,
    /// The image as of the last sync.
    synced: Vec<u8>,
    /// Changes since the last sync, oldest first.
    unsynced: Vec<Change>,
}

impl FileData {
    fn synced_as(bytes: Vec<u8>) -> Self {
        Self { current: bytes.clone(), synced: bytes, unsynced: Vec::new() }
    }

    /// What survives a power cut: the synced image, a prefix of the later changes, and
    /// perhaps part of the next one.
    fn survivor(&self, dice: &mut u64, damage: &mut Damage) -> Vec<u8> {
        let mut image = self.synced.clone();
        let kept = roll(dice, self.unsynced.len() as u64 + 1) as usize;
        for change in &self.unsynced[..kept] {
            change.apply(&mut image);
        }
        damage.dropped += (self.unsynced.len() - kept) as u64;
        if let Some(Change::Write { offset, data }) = self.unsynced.get(kept) {
            let sectors = data.len().div_ceil(SECTOR) as u64;
            let torn = (roll(dice, sectors) as usize * SECTOR).min(data.len());
            write_at(&mut image, *offset, &data[..torn]);
            damage.torn += u64::from(torn > 0);
            // One time in four the sector being written when the power went holds garbage
            // (the device promises nothing: no power-safe overwrite).
            if roll(dice, 4) == 0 {
                let end = (torn + SECTOR).min(data.len());
                let garbage: Vec<u8> = (torn..end).map(|_| roll(dice, 256) as u8).collect();
                write_at(&mut image, offset + torn, &garbage);
                damage.garbage += 1;
            }
        }
        image
    }
}

/// xorshift64*: the VFS's own dice, seeded by `arm`.
fn roll(state: &mut u64, n: u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
}

/// What the power cuts so far did to unsynced writes (over every reset).
#[derive(Debug, Default, Clone, Copy)]
pub struct Damage {
    /// Unsynced writes and truncations lost whole.
    pub dropped: u64,
    /// Writes kept in part.
    pub torn: u64,
    /// Sectors left holding garbage.
    pub garbage: u64,
}

#[derive(Default)]
struct Shm {
    regions: Vec<Box<[u8]>>,
    /// Per lock slot: readers holding it, or -1 for a writer.
    locks: [i32; SHM_LOCKS],
}

#[derive(Default)]
struct State {
    files: HashMap<String, FileData>,
    shm: HashMap<String, Shm>,
    /// Writes, truncations and syncs so far.
    io: u64,
    /// The I/O number at which the power goes.
    cut_at: Option<u64>,
    /// The surviving images, once the power has gone.
    survivors: Option<HashMap<String, Vec<u8>>>,
    dice: u64,
    temp_files: u64,
    damage: Damage,
}

impl State {
    /// Counts one write, truncation or sync; false when the power is (now) off.
    fn tick(&mut self) -> bool {
        if self.survivors.is_some() {
            return false;
        }
        self.io += 1;
        if Some(self.io) == self.cut_at {
            self.cut();
            return false;
        }
        true
    }

    fn cut(&mut self) {
        let (mut dice, mut damage) = (self.dice, self.damage);
        let survivors = self
            .files
            .iter()
            .map(|(name, file)| (name.clone(), file.survivor(&mut dice, &mut damage)))
            .collect();
        self.survivors = Some(survivors);
        self.damage = damage;
    }
}

/// A registered crash VFS (leaked: it lives as long as the process).
pub struct CrashVfs {
    name: String,
    state: Mutex<State>,
}

impl CrashVfs {
    /// Registers a crash VFS called `name` (not as the default).
    pub fn register(name: &str) -> &'static CrashVfs {
        let vfs: &'static CrashVfs =
            Box::leak(Box::new(CrashVfs { name: name.to_owned(), state: Mutex::default() }));
        let c_name = CString::new(name).expect("a VFS name");
        // SAFETY: the default VFS is a static of SQLite; the new one and its name are leaked,
        // so they outlive every connection.
        unsafe {
            let default = ffi::sqlite3_vfs_find(ptr::null());
            assert!(!default.is_null(), "SQLite has a default VFS");
            let methods = ffi::sqlite3_vfs {
                iVersion: 2,
                szOsFile: std::mem::size_of::<File>() as c_int,
                mxPathname: 512,
                pNext: ptr::null_mut(),
                zName: c_name.into_raw(),
                pAppData: vfs as *const CrashVfs as *mut c_void,
                xOpen: Some(x_open),
                xDelete: Some(x_delete),
                xAccess: Some(x_access),
                xFullPathname: Some(x_full_pathname),
                xSetSystemCall: None,
                xGetSystemCall: None,
                xNextSystemCall: None,
                ..*default
            };
            let rc = ffi::sqlite3_vfs_register(Box::into_raw(Box::new(methods)), 0);
            assert_eq!(rc, ffi::SQLITE_OK, "register the VFS");
        }
        vfs
    }

    /// The name the VFS was registered under (for `Options::vfs`).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Forgets everything and starts from `files`, all synced, the power on and no cut armed.
    pub fn reset(&self, files: &HashMap<String, Vec<u8>>) {
        let mut state = self.lock();
        let (temp_files, damage) = (state.temp_files, state.damage);
        *state = State { temp_files, damage, ..State::default() };
        for (name, bytes) in files {
            state.files.insert(name.clone(), FileData::synced_as(bytes.clone()));
        }
    }

    /// Every file as reads see it (after a clean close, that is what is synced).
    pub fn files(&self) -> HashMap<String, Vec<u8>> {
        let state = self.lock();
        state.files.iter().map(|(name, file)| (name.clone(), file.current.clone())).collect()
    }

    /// Cuts the power at write, truncation or sync number `at` (counted from the last reset),
    /// choosing what survives with `seed`.
    pub fn arm(&self, at: u64, seed: u64) {
        let mut state = self.lock();
        state.cut_at = Some(at);
        state.dice = seed | 1;
    }

    /// What the cuts so far did to unsynced writes.
    pub fn damage(&self) -> Damage {
        self.lock().damage
    }

    /// Writes, truncations and syncs since the last reset.
    pub fn io_count(&self) -> u64 {
        self.lock().io
    }

    /// Whether the power has been cut (since the last reset).
    pub fn is_cut(&self) -> bool {
        self.lock().survivors.is_some()
    }

    /// Cuts the power now, unless it has gone already.
    pub fn cut_now(&self) {
        let mut state = self.lock();
        if state.survivors.is_none() {
            state.cut();
        }
    }

    /// After a cut (and after the store that saw it is gone): the files become what survived,
    /// the shared memory is gone, the power is back. Panics if the power was never cut.
    pub fn reboot(&self) {
        let survivors = self.lock().survivors.take().expect("the power was cut");
        self.reset(&survivors);
    }
}

/// SQLite's file object, extended with what the VFS needs to find the file.
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    vfs: *const CrashVfs,
    name: *mut String,
    delete_on_close: bool,
    /// Shared-memory lock slots held, as bit masks.
    shm_shared: u32,
    shm_exclusive: u32,
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_lock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

/// The VFS of a `sqlite3_vfs` registered by `CrashVfs::register`.
unsafe fn crash_vfs<'a>(vfs: *mut ffi::sqlite3_vfs) -> &'a CrashVfs {
    unsafe { &*((*vfs).pAppData as *const CrashVfs) }
}

/// The file object and its VFS state, locked.
unsafe fn open_file<'a>(file: *mut ffi::sqlite3_file) -> (&'a mut File, MutexGuard<'a, State>) {
    let file = unsafe { &mut *(file as *mut File) };
    let state = unsafe { (*file.vfs).lock() };
    (file, state)
}

unsafe fn name_of<'a>(file: &File) -> &'a str {
    unsafe { (*file.name).as_str() }
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    unsafe {
        (*file).pMethods = ptr::null();
        let crash = crash_vfs(vfs);
        let mut state = crash.lock();
        let name = if name.is_null() {
            state.temp_files += 1;
            format!("temp-{}", state.temp_files)
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        };
        if !state.files.contains_key(&name) {
            if flags & ffi::SQLITE_OPEN_CREATE == 0 {
                return ffi::SQLITE_CANTOPEN;
            }
            state.files.insert(name.clone(), FileData::default());
        }
        let delete_on_close = flags & ffi::SQLITE_OPEN_DELETEONCLOSE != 0;
        let object = File {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            vfs: crash,
            name: Box::into_raw(Box::new(name)),
            delete_on_close,
            shm_shared: 0,
            shm_exclusive: 0,
        };
        ptr::write(file as *mut File, object);
        if !out_flags.is_null() {
            *out_flags = flags;
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    _sync_dir: c_int,
) -> c_int {
    unsafe {
        let name = CStr::from_ptr(name).to_string_lossy();
        match crash_vfs(vfs).lock().files.remove(name.as_ref()) {
            Some(_) => ffi::SQLITE_OK,
            None => ffi::SQLITE_IOERR_DELETE_NOENT,
        }
    }
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    unsafe {
        let name = CStr::from_ptr(name).to_string_lossy();
        let state = crash_vfs(vfs).lock();
        let file = state.files.get(name.as_ref());
        // As the unix VFS: an empty file does not "exist" (an empty WAL is no WAL).
        let found = match flags {
            ffi::SQLITE_ACCESS_EXISTS => file.is_some_and(|f| !f.current.is_empty()),
            _ => file.is_some(),
        };
        *out = c_int::from(found);
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_full_pathname(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    unsafe {
        let bytes = CStr::from_ptr(name).to_bytes_with_nul();
        if bytes.len() > n_out as usize {
            return ffi::SQLITE_CANTOPEN;
        }
        ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, out, bytes.len());
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    unsafe {
        let (object, mut state) = open_file(file);
        release_shm_locks(object, &mut state);
        let name = Box::from_raw(object.name);
        if object.delete_on_close {
            state.files.remove(name.as_str());
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    unsafe {
        let (object, state) = open_file(file);
        let out = std::slice::from_raw_parts_mut(buf as *mut u8, amount as usize);
        let empty = Vec::new();
        let bytes = state.files.get(name_of(object)).map_or(&empty, |f| &f.current);
        let start = (offset as usize).min(bytes.len());
        let end = (offset as usize + out.len()).min(bytes.len());
        let got = end - start;
        out[..got].copy_from_slice(&bytes[start..end]);
        if got < out.len() {
            out[got..].fill(0);
            return ffi::SQLITE_IOERR_SHORT_READ;
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    unsafe {
        let (object, mut state) = open_file(file);
        if !state.tick() {
            return ffi::SQLITE_IOERR_WRITE;
        }
        let data = std::slice::from_raw_parts(buf as *const u8, amount as usize).to_vec();
        let change = Change::Write { offset: offset as usize, data };
        change_file(&mut state, name_of(object), change)
    }
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    unsafe {
        let (object, mut state) = open_file(file);
        if !state.tick() {
            return ffi::SQLITE_IOERR_TRUNCATE;
        }
        change_file(&mut state, name_of(object), Change::Truncate(size as usize))
    }
}

fn change_file(state: &mut State, name: &str, change: Change) -> c_int {
    let Some(data) = state.files.get_mut(name) else {
        return ffi::SQLITE_IOERR;
    };
    change.apply(&mut data.current);
    data.unsynced.push(change);
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    unsafe {
        let (object, mut state) = open_file(file);
        if !state.tick() {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        if let Some(data) = state.files.get_mut(name_of(object)) {
            data.synced.clone_from(&data.current);
            data.unsynced.clear();
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    unsafe {
        let (object, state) = open_file(file);
        let len = state.files.get(name_of(object)).map_or(0, |f| f.current.len());
        *size = len as ffi::sqlite3_int64;
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_lock(_file: *mut ffi::sqlite3_file, _level: c_int) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_check_reserved_lock(
    _file: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    unsafe { *out = 0 };
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_file_control(
    _file: *mut ffi::sqlite3_file,
    _op: c_int,
    _arg: *mut c_void,
) -> c_int {
    ffi::SQLITE_NOTFOUND
}

unsafe extern "C" fn x_sector_size(_file: *mut ffi::sqlite3_file) -> c_int {
    SECTOR as c_int
}

/// No guarantees at all: no atomic writes, no safe append, no power-safe overwrite.
unsafe extern "C" fn x_device_characteristics(_file: *mut ffi::sqlite3_file) -> c_int {
    0
}

unsafe extern "C" fn x_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    unsafe {
        let (object, mut state) = open_file(file);
        let shm = state.shm.entry(name_of(object).to_owned()).or_default();
        let region = region as usize;
        while extend != 0 && shm.regions.len() <= region {
            shm.regions.push(vec![0_u8; size as usize].into_boxed_slice());
        }
        *out = match shm.regions.get_mut(region) {
            Some(memory) => memory.as_mut_ptr() as *mut c_void,
            None => ptr::null_mut(),
        };
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    unsafe {
        let (object, mut state) = open_file(file);
        let shm = state.shm.entry(name_of(object).to_owned()).or_default();
        let slots = offset as usize..(offset + n) as usize;
        if flags & ffi::SQLITE_SHM_UNLOCK != 0 {
            for slot in slots {
                unlock_slot(object, shm, slot);
            }
            return ffi::SQLITE_OK;
        }
        let exclusive = flags & ffi::SQLITE_SHM_EXCLUSIVE != 0;
        for slot in slots.clone() {
            let mine = (object.shm_shared | object.shm_exclusive) & (1 << slot) != 0;
            let free = if exclusive { shm.locks[slot] == 0 } else { shm.locks[slot] >= 0 };
            if !mine && !free {
                return ffi::SQLITE_BUSY;
            }
        }
        for slot in slots {
            let bit = 1 << slot;
            if (object.shm_shared | object.shm_exclusive) & bit != 0 {
                continue;
            }
            if exclusive {
                shm.locks[slot] = -1;
                object.shm_exclusive |= bit;
            } else {
                shm.locks[slot] += 1;
                object.shm_shared |= bit;
            }
        }
        ffi::SQLITE_OK
    }
}

fn unlock_slot(object: &mut File, shm: &mut Shm, slot: usize) {
    let bit = 1 << slot;
    if object.shm_exclusive & bit != 0 {
        shm.locks[slot] = 0;
    } else if object.shm_shared & bit != 0 {
        shm.locks[slot] -= 1;
    }
    object.shm_exclusive &= !bit;
    object.shm_shared &= !bit;
}

fn release_shm_locks(object: &mut File, state: &mut State) {
    // SAFETY: the name lives until the file is closed.
    let name = unsafe { name_of(object) };
    if let Some(shm) = state.shm.get_mut(name) {
        for slot in 0..SHM_LOCKS {
            unlock_slot(object, shm, slot);
        }
    }
}

unsafe extern "C" fn x_shm_barrier(_file: *mut ffi::sqlite3_file) {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

unsafe extern "C" fn x_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    unsafe {
        let (object, mut state) = open_file(file);
        release_shm_locks(object, &mut state);
        if delete != 0 {
            state.shm.remove(name_of(object));
        }
        ffi::SQLITE_OK
    }
}
