//! The units a sink may count, and one amount per unit.

/// What a sink counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Records,
    Requests,
    Bytes,
}

impl Unit {
    pub const ALL: [Unit; 3] = [Unit::Records, Unit::Requests, Unit::Bytes];

    pub fn name(self) -> &'static str {
        match self {
            Unit::Records => "records",
            Unit::Requests => "requests",
            Unit::Bytes => "bytes",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One amount per unit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PerUnit<T>(pub [T; 3]);

impl<T: Copy> PerUnit<T> {
    pub fn get(&self, unit: Unit) -> T {
        self.0[unit.index()]
    }

    pub fn set(&mut self, unit: Unit, value: T) {
        self.0[unit.index()] = value;
    }
}
